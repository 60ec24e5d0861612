#pragma once
// The attention mixer's own keys (model.attention.<field>).
#include <cstdint>
#include <vector>

#include "kernels/mixers/config_field.hpp"

namespace cpbench {

struct AttentionConfig {
  // model.attention.sinks: one learned sink logit per query head in every query's softmax (gpt-oss),
  // drawn N(0, kSinkInitStddev) (kernels/attention/sink.hpp). 0 / 1.
  int64_t sinks = 0;
  [[nodiscard]] std::vector<ConfigField> fields() { return {{"sinks", &sinks, 0, /*flag=*/true}}; }
};

}  // namespace cpbench
