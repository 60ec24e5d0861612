#pragma once
// A published model's configuration file as a mixer reads its own sizes from it (Mixer::read_hf). The
// harness implements it over a Hugging Face config.json (harness/model/hf_config.cpp); every error is one
// line naming the file and the field.
#include <cstdint>
#include <memory>
#include <string>

namespace cpbench {

class ConfigSource {
 public:
  virtual ~ConfigSource() = default;
  // The file's model_type ("qwen3_next"; the multimodal wrappers' text model: "qwen3_5_text").
  [[nodiscard]] virtual const std::string& model_type() const = 0;
  [[nodiscard]] virtual bool has(const std::string& field) const = 0;
  // A required integer >= min_value; throws naming the field when missing or out of range.
  [[nodiscard]] virtual int64_t integer(const std::string& field, int64_t min_value = 1) const = 0;
  // The same, `fallback` when the field is absent.
  [[nodiscard]] virtual int64_t integer_or(const std::string& field, int64_t fallback, int64_t min_value = 1) const = 0;
  // A nested object (Kimi Linear's linear_attn_config); throws naming it when missing or not an object.
  [[nodiscard]] virtual std::unique_ptr<ConfigSource> section(const std::string& field, const std::string& why) const = 0;
  // Throws UsageError "FILE: FIELD: what".
  [[noreturn]] virtual void fail(const std::string& field, const std::string& what) const = 0;
};

}  // namespace cpbench
