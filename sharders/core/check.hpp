#pragma once
// The bottom layer's error type and check macro, used by every layer of cpbench.
//
// CP_CHECK(cond, parts...) throws cpbench::Error. Its message is, in order: the rank context
// "[rank r/W] " when the calling thread has one (ScopedRankContext), the concatenation of `parts`
// (anything streamable: name the key, the shapes, the sharder), then " (check `cond` failed at
// file:line)". CP_CHECK_USAGE throws cpbench::UsageError for bad user input: its what() is the user's
// one line (no source location, which the user cannot act on); the location is kept in location().
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace cpbench {

class Error : public std::runtime_error {
 public:
  // `message` is what went wrong; `location` ("file:line, check `cond` failed") is where it was
  // detected and is appended to what().
  explicit Error(std::string message, std::string location = {}) : Error(std::move(message), std::move(location), true) {}
  // The message without the source location.
  [[nodiscard]] const std::string& message() const { return message_; }
  // "sharders/sharder.cpp:123, check `cond` failed", or "" when thrown without a check.
  [[nodiscard]] const std::string& location() const { return location_; }

 protected:
  Error(std::string message, std::string location, bool location_in_what)
      : std::runtime_error(location_in_what && !location.empty() ? message + " (" + location + ")" : message),
        message_(std::move(message)),
        location_(std::move(location)) {}

 private:
  std::string message_, location_;
};

// Bad user input (scenario, flags): the CLI reports it on one line and exits with status 2. what() is
// the message alone (a user acts on the key it names, not on our source line); location() keeps it.
class UsageError : public Error {
 public:
  explicit UsageError(std::string message, std::string location = {})
      : Error(std::move(message), std::move(location), false) {}
};

// The rank the calling thread works for, prefixed to every CP_CHECK message while set.
// The runner sets it for the duration of a case; nested scopes restore the outer one.
class ScopedRankContext {
 public:
  ScopedRankContext(int rank, int world);
  ~ScopedRankContext();
  ScopedRankContext(const ScopedRankContext&) = delete;
  ScopedRankContext& operator=(const ScopedRankContext&) = delete;
  // "[rank r/W] ", or "" outside any scope.
  [[nodiscard]] static std::string prefix();

 private:
  int previous_rank_, previous_world_;
};

namespace detail {
template <typename... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  return os.str();
}
// "file:line, check `cond` failed" with the file relative to the source tree.
[[nodiscard]] std::string check_location(const char* file, int line, const char* condition);
}  // namespace detail

// "[2, 8, 16]"
template <typename Sizes>
std::string shape_str(const Sizes& sizes) {
  std::ostringstream os;
  os << '[';
  bool first = true;
  for (auto s : sizes) {
    if (!first) os << ", ";
    os << s;
    first = false;
  }
  os << ']';
  return os.str();
}

}  // namespace cpbench

#define CP_CHECK(cond, ...)                                                                               \
  do {                                                                                                    \
    if (!(cond))                                                                                          \
      throw ::cpbench::Error(::cpbench::ScopedRankContext::prefix() + ::cpbench::detail::concat(__VA_ARGS__), \
                             ::cpbench::detail::check_location(__FILE__, __LINE__, #cond));                \
  } while (0)

#define CP_CHECK_USAGE(cond, ...)                                                      \
  do {                                                                                 \
    if (!(cond))                                                                       \
      throw ::cpbench::UsageError(::cpbench::detail::concat(__VA_ARGS__),               \
                                  ::cpbench::detail::check_location(__FILE__, __LINE__, #cond)); \
  } while (0)
