#pragma once
// The version stamp: cpbench's version and the git commit it was built from ("-dirty" when the tree
// differed). Regenerated at every build (cmake/version.cmake) into one source file, so a new commit
// recompiles that file only.
namespace cpbench {
[[nodiscard]] const char* version();
[[nodiscard]] const char* git_commit();
}  // namespace cpbench
