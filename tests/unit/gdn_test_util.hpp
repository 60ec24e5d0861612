#pragma once
// Helpers of the Gated DeltaNet layer tests (gdn_layer_test.cpp, gdn_cp_test.cpp): a stream of
// documents laid out by a registered layout, the layer's parameters from a seed, and the layer run on
// one rank or on W ranks as threads of this process over a real Gloo group (a HashStore), forward and
// backward, gathered back to global order.
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "harness/model/gdn.hpp"
#include "kernels/comm/process_group.hpp"
#include "sharders/registry.hpp"

namespace cpbench::gdn_test {

// torch 2.11's FlightRecorder corrupts itself under concurrent Gloo enqueues from rank threads
// (tests/unit/ssm_cp_test.cpp says more): turned off before main.
[[maybe_unused]] inline const int kNoFlightRecorder = ::setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);

struct Laid {
  GlobalLayout g;
  TokenMeta meta;  // [R, P] in global order
};

// Unpacked: one row per entry of `docs` (documents of those lengths), padded by the layout. Packed
// (thd): one stream of docs[0]'s documents, each padded by the layout.
inline Laid make_stream(const std::string& layout, int64_t W, const std::vector<std::vector<int64_t>>& docs) {
  const auto lay = make_layout(layout);
  LayoutRequest req;
  req.cp = W;
  Laid st;
  if (lay->packed()) {
    req.doc_lens = docs[0];
    st.g = lay->compute(req);
    const int64_t P = st.g.padded_seq_len;
    at::Tensor doc = at::full({1, P}, -1, at::kLong), valid = at::zeros({1, P}, at::kBool);
    for (size_t d = 0; d < docs[0].size(); ++d) {
      doc.narrow(1, st.g.cu_seqlens_padded[d], st.g.cu_seqlens_padded[d + 1] - st.g.cu_seqlens_padded[d])
          .fill_(static_cast<int64_t>(d));
      valid.narrow(1, st.g.cu_seqlens_padded[d], docs[0][d]).fill_(true);
    }
    st.meta = TokenMeta{at::arange(P).unsqueeze(0), at::zeros({1, P}, at::kLong), doc, valid};
    return st;
  }
  const int64_t S = std::accumulate(docs[0].begin(), docs[0].end(), int64_t{0});
  req.seq_len = S;
  st.g = lay->compute(req);
  const int64_t P = st.g.padded_seq_len, R = static_cast<int64_t>(docs.size());
  at::Tensor doc = at::full({R, P}, -1, at::kLong);
  for (int64_t r = 0; r < R; ++r) {
    int64_t at_ = 0, d = 0;
    for (int64_t len : docs[static_cast<size_t>(r)]) doc[r].narrow(0, at_, len).fill_(d++), at_ += len;
  }
  st.meta = TokenMeta{at::arange(P).unsqueeze(0).repeat({R, 1}), at::zeros({R, P}, at::kLong), doc,
                      (at::arange(P) < S).unsqueeze(0).repeat({R, 1})};
  return st;
}

inline GdnParams draw_params(const GdnConfig& c, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  GdnParams p;
  p.conv_w = at::normal(0.0, 0.5, {c.conv_channels(), c.conv}, gen, o);
  p.dt_bias = at::normal(-2.0, 0.5, {c.value_heads}, gen, o);
  p.A_log = at::normal(0.0, 0.5, {c.value_heads}, gen, o);
  p.norm_w = at::normal(1.0, 0.1, {c.value_head_dim}, gen, o);
  return p;
}

inline std::vector<at::Tensor> leaves(const GdnParams& p) { return {p.conv_w, p.dt_bias, p.A_log}; }

inline GdnParams as_leaves(const GdnParams& p, at::ScalarType dtype) {
  const auto f = [&](const at::Tensor& t) { return t.to(dtype).detach().requires_grad_(true); };
  return {f(p.conv_w), f(p.dt_bias), f(p.A_log), f(p.norm_w)};
}

struct LayerRun {
  at::Tensor y, proj_grad;               // [R, P, ...] in global order
  std::vector<at::Tensor> param_grads;   // summed over ranks
  std::vector<int64_t> bytes;            // per rank
  std::vector<int64_t> expected_bytes;   // per rank, gdn_cp_costs
  int64_t host_tensors_in_layers = 0;
};

// The layer over `st` on W threads, loss = sum(o * wy).
inline LayerRun run_cp(const Laid& st, const GdnConfig& c, const GdnParams& p64, const at::Tensor& proj,
                       const at::Tensor& wy, const MaskSpec& mask, at::ScalarType dtype, GdnCpOptions options) {
  const int64_t W = st.g.cp, R = st.meta.batch(), P = st.g.padded_seq_len;
  std::vector<int64_t> rank_order;
  for (const auto& r : st.g.ranks) rank_order.insert(rank_order.end(), r.begin(), r.end());
  const TokenMeta all_meta = st.meta.index_select(1, at::tensor(rank_order, at::kLong));
  auto store = c10::make_intrusive<c10d::HashStore>();
  LayerRun out;
  out.y = at::zeros({R, P, c.value_dim()}, at::kDouble);
  out.proj_grad = at::zeros({R, P, c.in_proj_width()}, at::kDouble);
  for (const auto& t : leaves(p64)) out.param_grads.push_back(at::zeros_like(t));
  out.bytes.assign(static_cast<size_t>(W), 0);
  out.expected_bytes.assign(static_cast<size_t>(W), 0);
  std::vector<int64_t> before(static_cast<size_t>(W)), after(static_cast<size_t>(W));
  std::mutex mu;
  std::vector<std::string> errors;
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < W; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::vector<int> ranks(static_cast<size_t>(W));
        std::iota(ranks.begin(), ranks.end(), 0);
        auto pg = comm::ProcessGroup::create(store, "gdn", ranks, static_cast<int>(r), comm::BackendKind::gloo,
                                             std::chrono::seconds(30));
        const comm::Communicator cm(pg.backend_ptr());
        const at::Tensor mine = at::tensor(st.g.ranks[static_cast<size_t>(r)], at::kLong);
        GdnCpOptions o = options;
        o.drop_incoming_state = options.drop_incoming_state && r == W - 1;
        GdnStepContext ctx = cp_gdn_context(cm, st.g, all_meta, mask, c, dtype, at::kCPU, "cp:test", o);
        int64_t sent = 0;
        ctx.bytes_sent = &sent;
        const GdnParams params = as_leaves(p64, dtype);
        const at::Tensor x = proj.index_select(1, mine).to(dtype).detach().requires_grad_(true);
        cm.barrier();
        before[static_cast<size_t>(r)] = ssm_host_tensors_built();
        const at::Tensor y = gdn_forward(x, params, c, ctx);
        (y.to(at::kDouble) * wy.index_select(1, mine)).sum().backward();
        cm.barrier();
        after[static_cast<size_t>(r)] = ssm_host_tensors_built();
        std::lock_guard<std::mutex> lock(mu);
        out.y.index_copy_(1, mine, y.detach().to(at::kDouble));
        out.proj_grad.index_copy_(1, mine, x.grad().to(at::kDouble));
        const auto ps = leaves(params);
        for (size_t i = 0; i < ps.size(); ++i) out.param_grads[i] += ps[i].grad().to(at::kDouble);
        out.bytes[static_cast<size_t>(r)] = sent;
        out.expected_bytes[static_cast<size_t>(r)] = gdn_cp_bytes(ctx.strategy, ctx.shape).total();
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mu);
        errors.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) ADD_FAILURE() << e;
  out.host_tensors_in_layers = after[0] - before[0];
  return out;
}

inline LayerRun run_single(const TokenMeta& meta, const GdnConfig& c, const GdnParams& p64, const at::Tensor& proj,
                           const at::Tensor& wy, const MaskSpec& mask, at::ScalarType dtype) {
  const GdnStepContext ctx = single_rank_gdn_context(meta, mask, c, dtype, at::kCPU);
  const GdnParams params = as_leaves(p64, dtype);
  const at::Tensor x = proj.to(dtype).detach().requires_grad_(true);
  const at::Tensor y = gdn_forward(x, params, c, ctx);
  (y.to(at::kDouble) * wy).sum().backward();
  LayerRun out;
  out.y = y.detach().to(at::kDouble);
  out.proj_grad = x.grad().to(at::kDouble);
  for (const auto& t : leaves(params)) out.param_grads.push_back(t.grad().to(at::kDouble));
  return out;
}

// max |a - b| / max |b|.
inline double rel_error(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-300, b.abs().max().item<double>());
}

}  // namespace cpbench::gdn_test
