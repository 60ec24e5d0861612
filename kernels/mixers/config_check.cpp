#include "kernels/mixers/config_check.hpp"

#include "sharders/core/check.hpp"

namespace cpbench {

void check_field_minimums(const std::string& section, const std::vector<ConfigField>& fields) {
  for (const ConfigField& f : fields) {
    const int64_t v = *f.value;
    const char* expected = f.flag ? "0 or 1" : f.min == 1 ? "a positive integer" : "a non-negative integer";
    CP_CHECK_USAGE(v >= f.min && (!f.flag || v <= 1), "model.", section, ".", f.name, ": expected ", expected,
                   ", got ", v);
  }
}

std::string even_split_reason(const std::string& key, int64_t n, int64_t cp, const std::string& why) {
  return n % cp == 0 ? "" : detail::concat(key, " ", n, " is not divisible by cp ", cp, " (", why, ")");
}

std::string split_or_replicate_reason(const std::string& key, int64_t n, int64_t cp, const std::string& why) {
  const bool fits = n < cp ? cp % n == 0 : n % cp == 0;
  return fits ? "" : detail::concat(key, " ", n, " and cp ", cp, ": one must divide the other (", why, ")");
}

}  // namespace cpbench
