#pragma once
// Typed access to one config.json object, with one-line errors "FILE: FIELD: what" (internal to
// harness/model/: hf_config and the per-family readers; the mixers read their sizes through it as a
// ConfigSource, Mixer::read_hf).
#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "kernels/mixers/mixer.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::hf {

struct Fields final : ConfigSource {
  Fields(const nlohmann::json& json, std::string file_name, std::string type_name)
      : j(json), file(std::move(file_name)), type(std::move(type_name)) {}
  const nlohmann::json& j;
  std::string file, type;

  [[nodiscard]] const std::string& model_type() const override { return type; }
  [[noreturn]] void fail(const std::string& field, const std::string& what) const override {
    throw UsageError(file + ": " + field + ": " + what);
  }
  [[nodiscard]] bool has(const std::string& field) const override { return j.contains(field) && !j[field].is_null(); }
  [[nodiscard]] std::unique_ptr<ConfigSource> section(const std::string& field, const std::string& why) const override {
    if (!has(field) || !j[field].is_object()) fail(field, "missing (" + why + ")");
    return std::make_unique<Fields>(j[field], file + ": " + field, type);
  }
  [[nodiscard]] std::string shown(const std::string& field) const {
    const std::string s = j[field].dump();
    return s.size() > 40 ? s.substr(0, 37) + "..." : s;
  }
  // A required integer >= min_value.
  [[nodiscard]] int64_t integer(const std::string& field, int64_t min_value = 1) const override {
    if (!has(field)) fail(field, "missing (model_type " + type + " needs it)");
    return integer_of(field, min_value);
  }
  [[nodiscard]] int64_t integer_or(const std::string& field, int64_t fallback, int64_t min_value = 1) const override {
    return has(field) ? integer_of(field, min_value) : fallback;
  }
  [[nodiscard]] int64_t integer_of(const std::string& field, int64_t min_value) const {
    const auto& v = j[field];
    if (!v.is_number_integer() || v.get<int64_t>() < min_value)
      fail(field, "expected an integer >= " + std::to_string(min_value) + ", got " + shown(field));
    return v.get<int64_t>();
  }
  [[nodiscard]] double number_or(const std::string& field, double fallback) const {
    if (!has(field)) return fallback;
    const auto& v = j[field];
    if (!v.is_number() || !(v.get<double>() > 0)) fail(field, "expected a positive number, got " + shown(field));
    return v.get<double>();
  }
  [[nodiscard]] bool boolean_or(const std::string& field, bool fallback) const {
    if (!has(field)) return fallback;
    if (!j[field].is_boolean()) fail(field, "expected true or false, got " + shown(field));
    return j[field].get<bool>();
  }
  [[nodiscard]] std::string text(const std::string& field) const {
    if (!has(field)) fail(field, "missing (model_type " + type + " needs it)");
    if (!j[field].is_string()) fail(field, "expected a string, got " + shown(field));
    return j[field].get<std::string>();
  }
};

}  // namespace cpbench::hf
