#include "kernels/mixers/attention/dsa/dsa_costs.hpp"

#include <algorithm>

namespace cpbench::dsa_costs {

int64_t wire_elements_per_token(const DsaDims& d, bool shared) {
  return d.mla.latent_dim() + (shared ? 0 : d.index_head_dim);
}

int64_t forward_bytes(const DsaDims& d, int64_t cp, int64_t batch, int64_t local_tokens, int64_t element_size,
                      bool shared) {
  return (cp - 1) * batch * local_tokens * wire_elements_per_token(d, shared) * element_size;
}

int64_t backward_bytes(const DsaDims& d, int64_t cp, int64_t batch, int64_t local_tokens, int64_t element_size,
                       bool shared) {
  return forward_bytes(d, cp, batch, local_tokens, std::max<int64_t>(4, element_size), shared);
}

int64_t ring_score_bytes(const DsaDims& d, int64_t cp, int64_t batch, int64_t local_tokens, int64_t element_size) {
  return (cp - 1) * batch * local_tokens * d.index_head_dim * element_size;
}

std::vector<Exchange> head_split_exchanges(const DsaDims& d, DsaLoss loss, int64_t cp, int64_t ulysses, int64_t batch,
                                           int64_t local_tokens, int64_t element_size) {
  const int64_t u = ulysses;
  const int64_t rows = (u - 1) * batch * local_tokens;  // what a rank sends: its U-1 blocks of S rows each
  const int64_t n = cp * local_tokens, k = std::min(d.topk, n), e = element_size, c = std::max<int64_t>(4, e);
  const int64_t hi = (d.index_heads + u - 1) / u;  // index heads per rank (padded to a multiple of U)
  const int64_t q = rows * (d.heads / u) * d.mla.qk_head_dim() * e, qi = rows * hi * d.index_head_dim * e,
                w = rows * hi * c, out = rows * (d.heads / u) * d.mla.v_head_dim * e;
  const bool dense = loss == DsaLoss::dense;
  std::vector<Exchange> x{{"q", q, q},
                          {"q_I", qi, qi},
                          {"head weights", w, w},
                          {"score sum", rows * n * c, dense ? rows * n * c : 0},
                          {"picks", rows * k * 8, 0},
                          {"KL target", rows * (dense ? n : k) * c, 0}};
  if (!dense) x.push_back({"picked score", rows * k * c, rows * k * c});
  x.push_back({"output", out, out});
  return x;
}

int64_t head_split_bytes(const DsaDims& d, DsaLoss loss, int64_t cp, int64_t ulysses, int64_t batch,
                         int64_t local_tokens, int64_t element_size) {
  int64_t sum = forward_bytes(d, cp, batch, local_tokens, element_size) +
                backward_bytes(d, cp, batch, local_tokens, element_size);
  for (const Exchange& x : head_split_exchanges(d, loss, cp, ulysses, batch, local_tokens, element_size))
    sum += x.forward + x.backward;
  return sum;
}

double indexer_flops(const DsaDims& d, double keys) {
  return 2.0 * static_cast<double>(d.index_heads * (d.index_head_dim + 1)) * keys;
}

double sparse_core_flops(const DsaDims& d, double keys) {
  const MlaDims& m = d.mla;
  const double h = static_cast<double>(d.heads);
  return 2.0 * h * static_cast<double>(2 * m.kv_lora_rank + m.qk_rope_head_dim) *
             std::min(keys, static_cast<double>(d.topk)) +
         2.0 * h * static_cast<double>(m.kv_lora_rank * (m.qk_nope_head_dim + m.v_head_dim));
}

double dense_core_flops(const DsaDims& d, double keys) {
  const MlaDims& m = d.mla;
  return 2.0 * static_cast<double>(d.heads * (m.qk_head_dim() + m.v_head_dim)) * keys;
}

namespace {
// sum over n = 1 .. tokens of min(n, k), / tokens.
double mean_min(double tokens, double k) {
  if (tokens <= k) return (tokens + 1) / 2;
  return (k * (k + 1) / 2 + (tokens - k) * k) / tokens;
}
}  // namespace

double indexer_flops_per_token(const DsaDims& d, int64_t tokens) {
  return indexer_flops(d, (static_cast<double>(tokens) + 1) / 2);  // linear in keys: the mean n_t
}

double sparse_core_flops_per_token(const DsaDims& d, int64_t tokens) {
  // Linear in min(n, k) plus a per-token term: evaluate at the mean of min(n_t, k) with k = infinity
  // inside (the mean already applies the cap).
  DsaDims uncapped = d;
  uncapped.topk = tokens;
  return sparse_core_flops(uncapped, mean_min(static_cast<double>(tokens), static_cast<double>(d.topk)));
}

double dense_core_flops_per_token(const DsaDims& d, int64_t tokens) {
  return dense_core_flops(d, (static_cast<double>(tokens) + 1) / 2);
}

}  // namespace cpbench::dsa_costs
