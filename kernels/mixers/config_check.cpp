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

}  // namespace cpbench
