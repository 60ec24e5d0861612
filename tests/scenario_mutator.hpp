#pragma once
// Seeded random mutations of scenario YAML text, for the scenario fuzz tests (tests/unit/fuzz_test.cpp
// in-process, tests/multirank/lifecycle_test.cpp through the real CLI). Deterministic for a seed.
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace cpbench::test {

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream ss(text);
  std::string line;
  while (std::getline(ss, line)) lines.push_back(line);
  return lines;
}

// 1 to 3 edits of one kind or another: a value replaced by a hostile one, a key renamed, a line
// deleted, duplicated or re-indented, a character inserted or deleted, the text truncated.
inline std::string mutate_scenario(const std::string& text, uint64_t seed) {
  static const std::vector<std::string> values = {
      "0", "-1", "1", "2", "3", "7", "512", "1000000000000", "99999999999999999999", "-9223372036854775808",
      "9223372036854775807", "1.5", "abc", "[]", "{}", "[1, 2]", "[0]", "[[1, 2], [3]]", "null", "~", "true", "\"\"",
      "causal", "document", "full", "sliding_window:0", "sliding_window:-3", "sliding_window:99999999999999999999",
      "thd", "workload_balanced", "local_only", "ring", "allgather", "a2a", "float16", "bfloat16", "cuda", "cpu",
      "inputs_embeds", "[100, 90, 60, 1]", "[0, 5]", "{preset: small}", "{preset: huge}", "match", "mismatch", "&a x",
      "*a", "!!binary abc", "'unterminated", "[unclosed", "{a: [b: c]}", "2048", "-100"};
  static const std::vector<std::string> keys = {
      "name", "model", "batch", "mask", "dtype", "device", "sweep", "expect", "measure", "timeout_s", "seed", "preset",
      "layers", "hidden", "heads", "kv_heads", "vocab", "ffn", "mrope_sections", "batch_size", "seq_len", "documents",
      "padding_token_id", "primary", "loss_mask", "mrope", "sharder", "transport", "cp", "dp", "warmup", "iters",
      "unknown_key", "seq_lens"};
  static const std::string chars = ":[]{},-#&*!|>'\"\t \n0a";
  std::mt19937_64 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % (n == 0 ? 1 : n)); };
  std::string out = text;
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int e = 0; e < edits; ++e) {
    std::vector<std::string> lines = split_lines(out);
    if (lines.empty()) lines.push_back("");
    const size_t li = pick(lines.size());
    std::string& line = lines[li];
    switch (rng() % 8) {
      case 0:
      case 1: {  // replace the value after a ':' (or the whole line) with a hostile one
        const auto colon = line.find(':');
        const std::string v = values[pick(values.size())];
        if (colon != std::string::npos) line = line.substr(0, colon + 1) + " " + v;
        else line += v;
        break;
      }
      case 2: {  // rename a key
        const auto colon = line.find(':');
        const auto start = line.find_first_not_of(" -");
        if (colon != std::string::npos && start != std::string::npos && start < colon)
          line = line.substr(0, start) + keys[pick(keys.size())] + line.substr(colon);
        break;
      }
      case 3:
        lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(li));
        break;
      case 4:
        lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(li), line);
        break;
      case 5:  // re-indent
        line = std::string(pick(6), ' ') + line.substr(std::min(line.size(), line.find_first_not_of(' ')));
        break;
      case 6: {  // one character inserted or deleted
        const size_t at = pick(line.size() + 1);
        if (rng() % 2 && at < line.size()) line.erase(at, 1);
        else line.insert(at, 1, chars[pick(chars.size())]);
        break;
      }
      default: {  // truncate
        std::string joined;
        for (const auto& l : lines) joined += l + "\n";
        out = joined.substr(0, pick(joined.size() + 1));
        continue;
      }
    }
    std::string joined;
    for (const auto& l : lines) joined += l + "\n";
    out = joined;
  }
  return out;
}

}  // namespace cpbench::test
