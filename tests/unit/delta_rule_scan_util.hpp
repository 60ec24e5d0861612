#pragma once
// Inputs and the chunked-vs-recurrence comparison of the delta-rule scan tests (gdn_scan_test.cpp with
// GDN's scalar gate, kda_scan_test.cpp with KDA's per-channel gate; kernels/mixers/gdn/gdn_scan.hpp).
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/mixers/gdn/gdn_scan.hpp"

namespace cpbench::delta_rule_test {

struct Inputs {
  at::Tensor q, k, v, g, beta, group, initial;
};

// scalar: g [R, L, H], decays of a few tens of tokens (GDN). channel: g [R, L, H, dk], log decays spread
// from ~-3 (forgets within a token) to ~-0.005 (reaches hundreds of tokens), times `decay_scale` (KDA).
enum class Gate { scalar, channel };

// R rows of L tokens, H heads, unit-norm keys (as the layer's L2 normalisation makes them), q scaled by
// dk^-1/2, documents of the given lengths (the same in every row; a row start is a reset), float64.
inline Inputs draw(Gate gate, int64_t R, int64_t L, int64_t H, int64_t dk, int64_t dv,
                   const std::vector<int64_t>& docs, uint64_t seed, bool initial, double decay_scale = 1.0) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  Inputs in;
  const auto unit = [](const at::Tensor& x) { return x / x.norm(2, -1, true); };
  in.q = unit(at::normal(0.0, 1.0, {R, L, H, dk}, gen, o)) / std::sqrt(static_cast<double>(dk));
  in.k = unit(at::normal(0.0, 1.0, {R, L, H, dk}, gen, o));
  in.v = at::normal(0.0, 1.0, {R, L, H, dv}, gen, o);
  in.g = gate == Gate::scalar ? -at::softplus(at::normal(-3.0, 1.0, {R, L, H}, gen, o))
                              : -decay_scale * at::softplus(at::normal(-2.0, 2.0, {R, L, H, dk}, gen, o));
  in.beta = at::sigmoid(at::normal(0.0, 1.0, {R, L, H}, gen, o));
  in.group = at::zeros({R, L}, at::kLong);
  int64_t at_ = 0, d = 0;
  for (int64_t len : docs) {
    in.group.narrow(1, at_, std::min(len, L - at_)).fill_(d++);
    at_ += len;
    if (at_ >= L) break;
  }
  if (at_ < L) in.group.narrow(1, at_, L - at_).fill_(d);
  for (int64_t r = 0; r < R; ++r) in.group[r] += 1000 * r;
  if (initial) in.initial = at::normal(0.0, 1.0, {R, H, dk, dv}, gen, o);
  return in;
}

// The inputs as autograd leaves (the initial state too when there is one).
inline std::vector<at::Tensor> leaves(Inputs& in) {
  std::vector<at::Tensor> v{in.q, in.k, in.v, in.g, in.beta};
  if (in.initial.defined()) v.push_back(in.initial);
  for (auto& t : v) t.requires_grad_(true);
  return v;
}

// max |a - b| / max |b|.
inline double rel(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-300, b.abs().max().item<double>());
}

// The worst relative difference between the chunked form (chunk `chunk`) and the recurrence over values,
// final state and every gradient of sum(o * w) + sum(final * w2), on 2 rows of L tokens, 3 heads, dk 8,
// dv 6.
inline double worst_difference(Gate gate, const std::vector<int64_t>& docs, int64_t L, int64_t chunk, bool initial) {
  Inputs a = draw(gate, 2, L, 3, 8, 6, docs, 11, initial);
  Inputs b = draw(gate, 2, L, 3, 8, 6, docs, 11, initial);
  const auto la = leaves(a), lb = leaves(b);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const at::Tensor w = at::normal(0.0, 1.0, {2, L, 3, 6}, gen, at::TensorOptions().dtype(at::kDouble));
  const at::Tensor w2 = at::normal(0.0, 1.0, {2, 3, 8, 6}, gen, at::TensorOptions().dtype(at::kDouble));
  const GdnScanResult c = gdn_chunk_scan(a.q, a.k, a.v, a.g, a.beta, a.group, chunk, a.initial);
  const GdnScanResult r = gdn_recurrence(b.q, b.k, b.v, b.g, b.beta, b.group, b.initial);
  ((c.o * w).sum() + (c.final_state * w2).sum()).backward();
  ((r.o * w).sum() + (r.final_state * w2).sum()).backward();
  double worst = std::max(rel(c.o, r.o), rel(c.final_state, r.final_state));
  for (size_t i = 0; i < la.size(); ++i) worst = std::max(worst, rel(la[i].grad(), lb[i].grad()));
  return worst;
}

}  // namespace cpbench::delta_rule_test
