#pragma once
// Where the tests find the built executables and the source tree. The build passes each as a path
// relative to the test executable's own folder (CPBENCH_EXE, CPBENCH_SOURCE_DIR, ... expand to
// built_path("<relative>"), tests/CMakeLists.txt): the same text in every clone, so a second clone's
// test objects come from ccache, which cannot relativize an absolute path inside a -D value.
#include <unistd.h>

#include <climits>
#include <map>
#include <mutex>
#include <string>

namespace cpbench::test {

// The folder of this executable joined with `relative`; the returned pointer lives for the process.
inline const char* built_path(const char* relative) {
  static std::mutex mu;
  static std::map<std::string, std::string> paths;
  const std::lock_guard<std::mutex> lock(mu);
  if (const auto it = paths.find(relative); it != paths.end()) return it->second.c_str();
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  std::string dir = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string(".");
  dir = dir.substr(0, dir.rfind('/'));
  return paths.emplace(relative, dir + "/" + relative).first->second.c_str();
}

}  // namespace cpbench::test
