#pragma once
// Helpers the linear mixers' layer tests share (ssm_cp_test.cpp, gdn_cp_test.cpp, gdn_layer_test.cpp):
// a stream of documents laid out by a registered layout, and a layer run on W ranks as threads of this
// process over a real Gloo group (a HashStore), forward and backward, gathered back to global order,
// with the bytes each rank counted against its formula's and the host tensors the layers built. Each
// mixer supplies only its context and its forward (RankSetup).
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/comm/process_group.hpp"
#include "kernels/mixers/linear/scan_plan.hpp"
#include "harness/runner/scenario.hpp"  // dtype_name
#include "sharders/registry.hpp"

namespace cpbench::linear_test {

// torch 2.11's FlightRecorder (c10d's per-collective trace ring, on by default) is not safe when
// several threads of one process enqueue Gloo collectives at once: its buffer corrupts itself and the
// process aborts in FlightRecorder::record. The threads here are ranks of real Gloo groups, so the
// recorder (a debugging aid) is turned off before main runs; real rank processes are not affected.
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

struct LayerRun {
  at::Tensor y, proj_grad;              // [R, P, ...] in global order
  std::vector<at::Tensor> param_grads;  // summed over ranks
  std::vector<int64_t> bytes;           // per rank
  std::vector<int64_t> expected_bytes;  // per rank, the mixer's formula
  int64_t host_tensors_in_layers = 0;
};

// What one rank's layer did: its output, the parameter leaves it read (their gradients are summed over
// the ranks) and what its formula says one layer sends.
struct RankRun {
  at::Tensor y;
  std::vector<at::Tensor> leaves;
  int64_t expected_bytes = 0;
};
// The layer on this rank's tokens x [R, S_local, width], its context already built.
using RankForward = std::function<RankRun(const at::Tensor& x)>;
// Rank r builds its step context over `cm` (counting what its collectives send into *sent) and returns
// its forward.
using RankSetup =
    std::function<RankForward(int64_t r, const comm::Communicator& cm, const TokenMeta& all_meta, int64_t* sent)>;

// The layer over `st` on W threads, loss = sum(y * wy); y has `width_out` channels, the parameters are
// shaped like `leaves64`.
inline LayerRun run_cp_layer(const Laid& st, int64_t width_out, const std::vector<at::Tensor>& leaves64,
                             const at::Tensor& proj, const at::Tensor& wy, at::ScalarType dtype,
                             const RankSetup& setup) {
  const int64_t W = st.g.cp, R = st.meta.batch(), P = st.g.padded_seq_len;
  std::vector<int64_t> rank_order;
  for (const auto& r : st.g.ranks) rank_order.insert(rank_order.end(), r.begin(), r.end());
  const TokenMeta all_meta = st.meta.index_select(1, at::tensor(rank_order, at::kLong));
  auto store = c10::make_intrusive<c10d::HashStore>();
  LayerRun out;
  out.y = at::zeros({R, P, width_out}, at::kDouble);
  out.proj_grad = at::zeros({R, P, proj.size(2)}, at::kDouble);
  for (const auto& t : leaves64) out.param_grads.push_back(at::zeros_like(t));
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
        auto pg = comm::ProcessGroup::create(store, "linear", ranks, static_cast<int>(r), comm::BackendKind::gloo,
                                             std::chrono::seconds(30));
        const comm::Communicator cm(pg.backend_ptr());
        const at::Tensor mine = at::tensor(st.g.ranks[static_cast<size_t>(r)], at::kLong);
        int64_t sent = 0;
        const RankForward forward = setup(r, cm, all_meta, &sent);
        const at::Tensor x = proj.index_select(1, mine).to(dtype).detach().requires_grad_(true);
        cm.barrier();  // every rank's context is built
        before[static_cast<size_t>(r)] = linear_host_tensors_built();
        const RankRun run = forward(x);
        (run.y.to(at::kDouble) * wy.index_select(1, mine)).sum().backward();
        cm.barrier();  // every rank's layer ran forward and backward
        after[static_cast<size_t>(r)] = linear_host_tensors_built();
        std::lock_guard<std::mutex> lock(mu);
        out.y.index_copy_(1, mine, run.y.detach().to(at::kDouble));
        out.proj_grad.index_copy_(1, mine, x.grad().to(at::kDouble));
        for (size_t i = 0; i < run.leaves.size(); ++i) out.param_grads[i] += run.leaves[i].grad().to(at::kDouble);
        out.bytes[static_cast<size_t>(r)] = sent;
        out.expected_bytes[static_cast<size_t>(r)] = run.expected_bytes;
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

// The same layer on one rank over the whole batch (the reference), loss = sum(y * wy).
inline LayerRun run_single_layer(const at::Tensor& proj, const at::Tensor& wy, at::ScalarType dtype,
                                 const RankForward& forward) {
  const at::Tensor x = proj.to(dtype).detach().requires_grad_(true);
  const RankRun run = forward(x);
  (run.y.to(at::kDouble) * wy).sum().backward();
  LayerRun out;
  out.y = run.y.detach().to(at::kDouble);
  out.proj_grad = x.grad().to(at::kDouble);
  for (const auto& t : run.leaves) out.param_grads.push_back(t.grad().to(at::kDouble));
  return out;
}

// max |a - b| / max |b|: the worst element against the tensor's scale.
inline double rel_error(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-300, b.abs().max().item<double>());
}

// The tolerance of a layer's CP run against its single-rank run, relative to the tensor's scale.
inline double tolerance(at::ScalarType dtype) {
  return dtype == at::kDouble ? 1e-10 : dtype == at::kFloat ? 1e-4 : 3e-2;
}

struct Compared {
  double y = 0, proj_grad = 0, param_grad = 0;
  [[nodiscard]] double worst() const { return std::max({y, proj_grad, param_grad}); }
};

// The documents of a case: unpacked, two rows with document starts at and away from chunk boundaries;
// thd, documents of lengths no multiple of 2W, so pad slots sit inside the stream between documents.
inline std::vector<std::vector<int64_t>> docs_for(const std::string& layout) {
  if (make_layout(layout)->packed()) return {{29, 7, 40, 13}};
  return {{37, 11, 30, 17}, {52, 20, 23}};
}

// The CP run and the single-rank run of one case over the same stream and seeded inputs.
using RunBoth = std::function<std::pair<LayerRun, LayerRun>(const Laid& st, const at::Tensor& proj,
                                                            const at::Tensor& wy, const MaskSpec& mask)>;

// Runs one case (`layout` at W, `mask`; proj of width_in channels, y of width_out) and compares; checks
// that every rank sent what its formula says and that no layer built a host tensor.
inline Compared check_case(const std::string& layout, int64_t W, const std::string& mask, int64_t width_in,
                           int64_t width_out, const RunBoth& run) {
  const Laid st = make_stream(layout, W, docs_for(layout));
  const int64_t R = st.meta.batch(), P = st.g.padded_seq_len;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(77);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor proj = at::normal(0.0, 1.0, {R, P, width_in}, gen, o);
  const at::Tensor wy = at::normal(0.0, 1.0, {R, P, width_out}, gen, o);
  const auto [got, ref] = run(st, proj, wy, MaskSpec::parse(mask));
  for (int64_t r = 0; r < W; ++r)
    EXPECT_EQ(got.bytes[static_cast<size_t>(r)], got.expected_bytes[static_cast<size_t>(r)])
        << "rank " << r << ": the layer's count against its formula";
  EXPECT_GT(got.bytes[0], 0);
  EXPECT_EQ(got.host_tensors_in_layers, 0) << "a layer built a host tensor (index map or plan) for the device";
  Compared c;
  c.y = rel_error(got.y, ref.y);
  c.proj_grad = rel_error(got.proj_grad, ref.proj_grad);
  for (size_t i = 0; i < ref.param_grads.size(); ++i)
    c.param_grad = std::max(c.param_grad, rel_error(got.param_grads[i], ref.param_grads[i]));
  return c;
}

// One case of a layer test: a layout at W, a mask, a dtype and the mixer's strategy.
template <class Strategy>
struct LayerCase {
  std::string layout;
  int64_t W;
  std::string mask;
  at::ScalarType dtype;
  Strategy strategy = Strategy::state_passing;
};

// "layout/W2/causal/float64/state_passing": a case's name in failure messages.
template <class Case>
[[nodiscard]] std::string case_label(const Case& k) {
  return k.layout + "/W" + std::to_string(k.W) + "/" + k.mask + "/" + dtype_name(k.dtype) + "/" + to_string(k.strategy);
}

// The state-dropped negative control (the last rank ignores the state arriving at its chunks) on
// load_balanced, causal, W = 2 and 4: outputs and parameter gradients off by more than 1e3 x the
// tolerance. `check(k)` runs case k with the control on.
template <class Strategy, class Check>
void expect_dropped_state_caught(const Check& check) {
  for (int64_t W : {2, 4}) {
    const LayerCase<Strategy> k{"load_balanced", W, "causal", at::kDouble};
    const Compared d = check(k);
    EXPECT_GT(d.y, 1e3 * tolerance(k.dtype)) << case_label(k);
    EXPECT_GT(d.param_grad, 1e3 * tolerance(k.dtype)) << case_label(k);
  }
}

}  // namespace cpbench::linear_test
