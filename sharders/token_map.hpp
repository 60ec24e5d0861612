#pragma once
// Token maps (internal to sharders/): how the Sharder's token verbs move a tensor's sequence dim at copy
// speed. A map is built once per (coordinates, length, device) from the layout's index map and kept in
// a TokenMapCache until the next shard(); applying one writes every output element once (slice copies
// for a few long runs, else one index_select / index_copy).
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cpbench {

// A token map: output element j of the sequence dim comes from input element src (or is `fill`).
// Built once per (kind, length, device) from the layout and cached by the Sharder.
struct TokenMap {
  // len elements: src, src + step, ... -> dst, dst + 1, ... (ScatterMap: src, src + 1, ... -> dst,
  // dst + step, ...); src -1: `fill`. Strided runs make striped maps one slice copy per rank.
  struct Run {
    int64_t src = 0, dst = 0, len = 0, step = 1;
  };
  int64_t out_len = 0;
  bool use_runs = false;  // few long runs: slice copies; else index_select
  std::vector<Run> runs;
  at::Tensor index;  // int64 [out_len], holes point at 0 (index path)
  at::Tensor holes;  // int64 output positions taking `fill`; undefined when none
};
// The gather counterpart: rank r's local element j goes to output position dst (or nowhere).
struct ScatterMap {
  int64_t out_len = 0;
  bool use_runs = false;
  std::vector<std::vector<TokenMap::Run>> runs;  // per rank, src = local index
  std::vector<at::Tensor> dst;                   // per rank, int64 output positions of the kept locals
  std::vector<at::Tensor> kept;                  // per rank, kept local indices; undefined = all
  at::Tensor holes;                              // output positions no rank fills; undefined when none
  std::vector<TokenMap::Run> hole_runs;
};

// int64 [v.size()] on `device`.
[[nodiscard]] at::Tensor as_index_tensor(const std::vector<int64_t>& v, const at::Device& device);

// The map of output j <- input src[j] (-1: `fill`).
[[nodiscard]] TokenMap make_token_map(const std::vector<int64_t>& src, const at::Device& device);
// The map of rank r's local j -> output dst[r][j] (-1: dropped) into `out_len` outputs; outputs no rank
// writes are holes.
[[nodiscard]] ScatterMap make_scatter_map(const std::vector<std::vector<int64_t>>& dst, int64_t out_len,
                                          const at::Device& device);

// t with its dim `dim` mapped through m; holes get *fill, which must be given when m has holes.
[[nodiscard]] at::Tensor apply_token_map(const TokenMap& m, const at::Tensor& t, int64_t dim,
                                         const std::optional<at::Scalar>& fill);
// parts[r] (rank r's shard) scattered through m along `dim`; holes get *fill (needed when m has holes).
[[nodiscard]] at::Tensor apply_scatter_map(const ScatterMap& m, const std::vector<at::Tensor>& parts, int64_t dim,
                                           const std::optional<at::Scalar>& fill);

// Maps keyed by (coordinates, length, device), each built by `build` on first use; clear() on a new shard.
class TokenMapCache {
 public:
  [[nodiscard]] const TokenMap& shard(int coords, int64_t length, const at::Device& device,
                                      const std::function<TokenMap()>& build);
  [[nodiscard]] const ScatterMap& gather(int coords, int64_t length, const at::Device& device,
                                         const std::function<ScatterMap()>& build);
  void clear();

 private:
  std::map<std::string, TokenMap> shard_;
  std::map<std::string, ScatterMap> gather_;
};

}  // namespace cpbench
