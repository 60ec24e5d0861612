#include "harness/runner/yaml_read.hpp"

#include <string>
#include <vector>

#include "harness/runner/scenario.hpp"  // did_you_mean

namespace cpbench::yaml_read {

void Ctx::fail(const std::string& path, const std::string& what) const { throw UsageError(file + ": " + path + ": " + what); }

std::string scalar_text(const YAML::Node& n) {
  if (n.IsScalar()) return "\"" + n.Scalar() + "\"";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

int64_t read_int(const Ctx& c, const YAML::Node& n, const std::string& path, int64_t min_value) {
  int64_t v = 0;
  bool ok = n.IsScalar();
  if (ok) {
    const std::string& s = n.Scalar();
    size_t pos = 0;
    try {
      v = std::stoll(s, &pos);
      ok = pos == s.size();
    } catch (...) {
      ok = false;
    }
  }
  if (!ok || v < min_value)
    c.fail(path, std::string("expected ") + (min_value > 0 ? "a positive integer" : "an integer >= " + std::to_string(min_value)) +
                     ", got " + scalar_text(n));
  return v;
}

// A finite number > 0 and, when `max_value` > 0 is given, <= it.
double read_positive(const Ctx& c, const YAML::Node& n, const std::string& path, double max_value) {
  double v = 0;
  bool ok = n.IsScalar();
  if (ok) {
    const std::string& s = n.Scalar();
    size_t pos = 0;
    try {
      v = std::stod(s, &pos);
      ok = pos == s.size() && std::isfinite(v) && v > 0 && (max_value <= 0 || v <= max_value);
    } catch (...) {
      ok = false;
    }
  }
  if (!ok)
    c.fail(path, "expected a number > 0" + (max_value > 0 ? " and <= " + std::to_string(max_value) : std::string()) +
                     ", got " + scalar_text(n));
  return v;
}

std::string read_str(const Ctx& c, const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) c.fail(path, "expected a string, got " + scalar_text(n));
  return n.Scalar();
}

bool read_bool(const Ctx& c, const YAML::Node& n, const std::string& path) {
  if (n.IsScalar()) {
    const std::string& s = n.Scalar();
    if (s == "true" || s == "yes" || s == "on") return true;
    if (s == "false" || s == "no" || s == "off") return false;
  }
  c.fail(path, "expected true or false, got " + scalar_text(n));
}

void check_keys(const Ctx& c, const YAML::Node& map, const std::string& path, const std::vector<std::string>& known) {
  if (!map.IsMap()) c.fail(path.empty() ? "(top level)" : path, "expected a mapping, got " + scalar_text(map));
  for (const auto& kv : map) {
    const std::string key = kv.first.as<std::string>();
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      std::string hint = did_you_mean(key, known);
      std::string known_list;
      for (const auto& k : known) known_list += (known_list.empty() ? "" : ", ") + k;
      c.fail(path.empty() ? key : path + "." + key,
             "unknown key" + (hint.empty() ? "" : "; did you mean '" + hint + "'?") + " (known: " + known_list + ")");
    }
  }
}

// A scalar or a list of scalars -> list of strings, each validated by `check`.
std::vector<std::string> read_str_list(const Ctx& c, const YAML::Node& n, const std::string& path,
                                       const std::function<void(const std::string&, const std::string&)>& check) {
  std::vector<std::string> out;
  if (n.IsSequence()) {
    if (n.size() == 0) c.fail(path, "expected at least one value, got an empty list");
    for (size_t i = 0; i < n.size(); ++i) {
      std::string p = path + "[" + std::to_string(i) + "]";
      out.push_back(read_str(c, n[i], p));
      check(p, out.back());
    }
  } else {
    out.push_back(read_str(c, n, path));
    check(path, out.back());
  }
  return out;
}

std::vector<int64_t> read_int_list(const Ctx& c, const YAML::Node& n, const std::string& path, int64_t min_value) {
  std::vector<int64_t> out;
  if (n.IsSequence()) {
    if (n.size() == 0) c.fail(path, "expected at least one value, got an empty list");
    for (size_t i = 0; i < n.size(); ++i) out.push_back(read_int(c, n[i], path + "[" + std::to_string(i) + "]", min_value));
  } else {
    out.push_back(read_int(c, n, path, min_value));
  }
  return out;
}

}  // namespace cpbench::yaml_read
