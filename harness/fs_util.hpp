#pragma once
// Small POSIX file-system helpers.
//
// Why not std::filesystem: the PyPI torch wheel's libtorch.so exports its own copy of the
// std::filesystem symbols (remove_all, read_symlink, create_directory, ...), built against another
// libstdc++; the dynamic linker binds our calls to those, and remove_all crashed inside libtorch.
// Code linked with LibTorch uses these helpers instead.
#include <string>

namespace cpbench::fsu {

[[nodiscard]] bool exists(const std::string& path);
// mkdir -p; throws cpbench::Error naming the path.
void make_dirs(const std::string& path);
// rm -rf; silent when the path does not exist; throws on other errors.
void remove_tree(const std::string& path);
// readlink(2) of `path` (e.g. /proc/self/exe).

}  // namespace cpbench::fsu
