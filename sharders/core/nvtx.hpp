#pragma once
// NVTX3 ranges with cpbench's naming convention `cp:<sharder>:<phase>[:<step>]` (docs/architecture.md).
// A range costs a few nanoseconds when no tool is attached (NVTX3 is header-only and checks for an
// injection library once).
#include <nvtx3/nvtx3.hpp>

#include <string>

namespace cpbench::nvtx {

// "cp:<sharder>"; the prefix every range of a case starts with.
[[nodiscard]] inline std::string prefix(const std::string& sharder) { return "cp:" + sharder; }

// Pushes "<prefix>:<phase>" for its lifetime. An empty prefix means "cp".
class Range {
 public:
  Range(const std::string& prefix, const char* phase)
      : range_{(prefix.empty() ? std::string("cp") : prefix) + ":" + phase} {}
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  nvtx3::scoped_range range_;
};

}  // namespace cpbench::nvtx
