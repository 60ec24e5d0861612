#include "sharders/core/check.hpp"

#include <cstring>

namespace cpbench {

namespace {
thread_local int t_rank = -1;
thread_local int t_world = 0;
}  // namespace

ScopedRankContext::ScopedRankContext(int rank, int world) : previous_rank_(t_rank), previous_world_(t_world) {
  t_rank = rank;
  t_world = world;
}

ScopedRankContext::~ScopedRankContext() {
  t_rank = previous_rank_;
  t_world = previous_world_;
}

std::string ScopedRankContext::prefix() {
  return t_rank < 0 ? std::string() : detail::concat("[rank ", t_rank, "/", t_world, "] ");
}

namespace detail {
std::string check_location(const char* file, int line, const char* condition) {
  // __FILE__ is absolute in out-of-tree builds; the part from the top-level folder on is what a
  // reader can open.
  std::string f = file;
  for (const char* top : {"/sharders/", "/kernels/", "/harness/", "/reports/", "/tests/"}) {
    const auto at = f.rfind(top);
    if (at != std::string::npos) {
      f = f.substr(at + 1);
      break;
    }
  }
  return concat(f, ":", line, ", check `", condition, "` failed");
}
}  // namespace detail

}  // namespace cpbench
