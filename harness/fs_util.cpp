#include "harness/fs_util.hpp"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "sharders/core/check.hpp"

namespace cpbench::fsu {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

void make_dirs(const std::string& path) {
  std::string cur;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!cur.empty() && ::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
        throw Error(detail::concat(path, ": cannot create directory ", cur, ": ", std::strerror(errno)));
    }
    if (i < path.size()) cur += path[i];
  }
  struct stat st {};
  CP_CHECK(::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode), path, ": not a directory");
}

namespace {
int remove_entry(const char* p, const struct stat*, int, struct FTW*) { return ::remove(p) == 0 ? 0 : errno; }
}  // namespace

void remove_tree(const std::string& path) {
  if (!exists(path)) return;
  const int rc = ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  CP_CHECK(rc == 0, path, ": cannot remove: ", std::strerror(rc > 0 ? rc : errno));
}

}  // namespace cpbench::fsu
