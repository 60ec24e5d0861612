#include "sharders/core/version.hpp"

#include "cpbench/version.hpp"  // generated

namespace cpbench {
const char* version() { return kVersion; }
const char* git_commit() { return kGitCommit; }
}  // namespace cpbench
