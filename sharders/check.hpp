#pragma once
// One error type and one check macro for all of cpbench.
//
// CP_CHECK(cond, parts...) throws cpbench::Error whose message is the concatenation of `parts`
// (anything streamable). Messages name the key, the shapes and (where known) the rank; callers that
// know the scenario file and case add that context with Error::with_context as the error travels up.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace cpbench {

class Error : public std::runtime_error {
 public:
  explicit Error(std::string message) : std::runtime_error(std::move(message)) {}
  // A new Error whose message is "<context>: <this message>".
  [[nodiscard]] Error with_context(const std::string& context) const {
    return Error(context + ": " + what());
  }
};

// Bad user input (scenario, flags): the CLI reports it on one line and exits with status 2.
class UsageError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  return os.str();
}
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

#define CP_CHECK(cond, ...)                                                   \
  do {                                                                        \
    if (!(cond)) throw ::cpbench::Error(::cpbench::detail::concat(__VA_ARGS__)); \
  } while (0)

#define CP_CHECK_USAGE(cond, ...)                                                  \
  do {                                                                             \
    if (!(cond)) throw ::cpbench::UsageError(::cpbench::detail::concat(__VA_ARGS__)); \
  } while (0)
