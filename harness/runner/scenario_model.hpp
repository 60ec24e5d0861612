#pragma once
// The scenario's `model:` section -> ModelConfig: a preset by name, or a Hugging Face config.json
// (model.config: a path next to the scenario or a shipped model's name) shrunk by the explicit keys
// (layers, hidden, heads, kv_heads, vocab, ffn, mixers, ssm.*), which override the file and keep its
// ratios (harness/model/hf_config.hpp). Errors: yaml_read.hpp's one-line UsageError.
#include "harness/model/model.hpp"
#include "harness/runner/yaml_read.hpp"

namespace cpbench {

[[nodiscard]] ModelConfig read_model(const yaml_read::Ctx& c, const YAML::Node& m);

}  // namespace cpbench
