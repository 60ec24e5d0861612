#pragma once
// The one check every mixer config's validate() starts with: each of its scenario fields (fields(), the
// keys model.<section>.<name>) at least its minimum. A config adds only the rules between its fields.
// And the two ways a config's heads meet a CP size, for its cp_unsupported_reason().
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/mixers/config_field.hpp"

namespace cpbench {

// Throws UsageError "model.<section>.<name>: expected a positive integer, got V" (a non-negative one
// for a minimum of 0, "0 or 1" for a flag) for the first field below its minimum or a flag above 1.
void check_field_minimums(const std::string& section, const std::vector<ConfigField>& fields);

// The same over a config's own fields(), which hands out pointers and so needs a mutable config: the
// check reads a copy.
template <class Config>
void check_field_minimums(const std::string& section, const Config& config) {
  Config copy = config;
  check_field_minimums(section, copy.fields());
}

// "" when cp divides the `n` units of field `key` (each rank runs n / cp of them), else why not, with
// `why` (what each rank would run) in parentheses.
[[nodiscard]] std::string even_split_reason(const std::string& key, int64_t n, int64_t cp, const std::string& why);

// "" when one of `n` (groups shared by several heads, field `key`) and cp divides the other: split over
// the ranks (n >= cp) or replicated across them (n < cp); else why not, with `why` in parentheses.
[[nodiscard]] std::string split_or_replicate_reason(const std::string& key, int64_t n, int64_t cp,
                                                    const std::string& why);

}  // namespace cpbench
