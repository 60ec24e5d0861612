// Mamba CP strategies (harness/model/ssm_cp_costs.hpp, ssm_state_passing.hpp, mamba.hpp):
//  - the bytes and memory formulas against numbers worked out by hand, and their S dependence;
//  - the layout rule of state passing (striped refused, every chunked layout accepted) and the
//    scenario's ssm_cp axis;
//  - the layer itself, W ranks as threads over a real Gloo group: state passing (and hidden-parallel)
//    against the single-rank layer over the same stream, values and every gradient, on each layout
//    whose ranks own chunks, at W = 2, 3, 4, causal and document masks, pads inside a thd stream and at
//    a row's end, two rows, float64 / float32 / bfloat16; the bytes each rank counted against the
//    formula; no host-built tensor inside a layer; and the negative control dropping a rank's state.
#include <gtest/gtest.h>

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <exception>
#include <mutex>
#include <numeric>
#include <string>
#include <cstdlib>
#include <thread>
#include <vector>

#include "harness/model/mamba.hpp"
#include "harness/model/ssm_cp_costs.hpp"
#include "harness/model/ssm_state_passing.hpp"
#include "harness/runner/scenario.hpp"
#include "kernels/comm/process_group.hpp"
#include "sharders/core/check.hpp"
#include "sharders/registry.hpp"

using namespace cpbench;

namespace {

// The layer tests run W ranks as threads of this process, each with its own ProcessGroupGloo. torch
// 2.11's c10d FlightRecorder (one per process) inserts every enqueued collective into a std::map
// without a lock for Gloo groups: concurrent enqueues from the rank threads corrupted it (SIGSEGV in
// std::_Rb_tree_insert_and_rebalance under FlightRecorder::recordWithResetEnabled from
// ProcessGroupGloo::barrier; 1 run in ~10 of this suite). A buffer size of 0 turns the recorder off; it
// is read once, when the recorder is first made, so this runs before main. (Ranks as processes, as
// cpbench runs them, never share a recorder.)
[[maybe_unused]] const int kNoFlightRecorder = ::setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);

SsmCpShape shape_for_hand_numbers() {
  SsmCpShape s;
  s.batch = 2;
  s.seq_len = 64;
  s.cp = 4;
  s.heads = 4;
  s.head_dim = 16;
  s.state = 8;
  s.groups = 2;
  s.conv = 4;
  s.elem_bytes = 8;
  s.state_elem_bytes = 8;
  s.chunks_per_rank = 2;
  return s;
}

}  // namespace

TEST(SsmCpCosts, BytesAndMemoryMatchHandWorkedNumbers) {
  const SsmCpShape s = shape_for_hand_numbers();
  // hidden_parallel: 1 head per rank (16 x channels + 1 dt), groups 2 < W 4: one group of B and C per
  // rank (2 x 8): 33 channels in, 16 back, 16 tokens per rank, 3 peers, 2 rows, 8 bytes.
  EXPECT_EQ(s.hidden_parallel_channels(), 33);
  const SsmCpBytes hp = hidden_parallel_bytes(s);
  EXPECT_EQ(hp.forward, 3 * 2 * 16 * (33 + 16) * 8);
  EXPECT_EQ(hp.backward, hp.forward);
  EXPECT_EQ(hp.calls_forward, 2);
  // state_passing: per chunk and row 4 heads x (16 x 8 + 1) summary numbers and 3 x 96 halo inputs.
  const SsmCpBytes sp = state_passing_bytes(s);
  EXPECT_EQ(s.conv_channels(), 96);
  EXPECT_EQ(sp.forward, 3 * (2 * 2 * 4 * 129 * 8 + 2 * 2 * 3 * 96 * 8));
  EXPECT_EQ(sp.total(), 2 * sp.forward);
  EXPECT_EQ(sp.calls_forward, 2);
  EXPECT_EQ(ssm_cp_extra_memory_bytes(SsmCpStrategy::hidden_parallel, s), 2 * 64 * 49 * 8);
  EXPECT_EQ(ssm_cp_extra_memory_bytes(SsmCpStrategy::state_passing, s),
            4 * (2 * 2 * 4 * 129 * 8 + 2 * 2 * 3 * 96 * 8) + 2 * 2 * 4 * 16 * 8 * 8);

  // S x 4: hidden-parallel's bytes x 4, state passing's unchanged. bfloat16 activations, float32 state.
  SsmCpShape longer = s;
  longer.seq_len *= 4;
  EXPECT_EQ(hidden_parallel_bytes(longer).total(), 4 * hp.total());
  EXPECT_EQ(state_passing_bytes(longer).total(), sp.total());
  SsmCpShape bf16 = s;
  bf16.elem_bytes = 2;
  bf16.state_elem_bytes = 4;
  EXPECT_EQ(state_passing_bytes(bf16).forward, 3 * (2 * 2 * 4 * 129 * 4 + 2 * 2 * 3 * 96 * 2));
  SsmCpShape k1 = s;
  k1.conv = 1;
  EXPECT_EQ(state_passing_bytes(k1).forward, 3 * 2 * 2 * 4 * 129 * 8);
  EXPECT_EQ(state_passing_bytes(k1).calls_forward, 1);
  SsmCpShape one = s;
  one.cp = 1;
  EXPECT_EQ(ssm_cp_bytes(SsmCpStrategy::state_passing, one).total(), 0);
  EXPECT_EQ(ssm_cp_bytes(SsmCpStrategy::hidden_parallel, one).total(), 0);
  SsmCpShape three = s;
  three.cp = 3;
  three.seq_len = 63;
  EXPECT_THROW((void)hidden_parallel_bytes(three), Error) << "4 heads do not split over 3 ranks";
  EXPECT_NO_THROW((void)state_passing_bytes(three));
}

TEST(SsmCpCosts, StrategyNamesRoundTrip) {
  for (const auto& n : known_ssm_cp_strategies()) EXPECT_EQ(to_string(*parse_ssm_cp_strategy(n)), n);
  EXPECT_FALSE(parse_ssm_cp_strategy("ring").has_value());
}

TEST(SsmCpCosts, ContiguousRunsOfALayout) {
  using Runs = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(contiguous_runs({0, 1, 2, 7, 8, 3}), (Runs{{0, 3}, {3, 5}, {5, 6}}));
  EXPECT_EQ(contiguous_runs({}), Runs{});
  LayoutRequest req;
  req.cp = 4;
  req.seq_len = 64;
  EXPECT_EQ(max_runs_per_rank(make_layout("contiguous")->compute(req)), 1);
  EXPECT_EQ(max_runs_per_rank(make_layout("load_balanced")->compute(req)), 2);
  EXPECT_EQ(max_runs_per_rank(make_layout("striped")->compute(req)), 16);
  req.doc_lens = {16, 24};
  // thd: two head-tail pieces per document; rank 0's tail of document 0 touches its head of document 1.
  EXPECT_EQ(max_runs_per_rank(make_layout("thd")->compute(req)), 4);
  EXPECT_EQ(contiguous_runs(make_layout("thd")->compute(req).ranks[0]).size(), 3u);
}

TEST(SsmCpCosts, StatePassingRefusesOnlyLayoutsWithoutChunks) {
  for (int64_t W : {2, 3, 4}) {
    for (const auto& name : {"contiguous", "load_balanced", "thd", "sdpa_wrap", "workload_balanced"})
      EXPECT_EQ(state_passing_unsupported_reason(*make_layout(name), W), "") << name << " W " << W;
    const std::string why = state_passing_unsupported_reason(*make_layout("striped"), W);
    EXPECT_NE(why.find("layout striped"), std::string::npos) << why;
    EXPECT_EQ(why.find('\n'), std::string::npos) << "one line";
  }
  EXPECT_EQ(state_passing_unsupported_reason(*make_layout("striped"), 1), "");
}

TEST(SsmCpScenario, AxisParsedOnceIntoTheCase) {
  const std::string model = "model: {preset: tiny-hybrid, ssm: {heads: 4, groups: 2}}\n";
  const ScenarioSpec s = parse_scenario(
      model + "sweep: {sharder: [load_balanced, thd], cp: [2, 3], ssm_cp: [state_passing]}\n", "x.yaml");
  ASSERT_EQ(s.cases.size(), 4u) << "cp 3 runs under state passing (no head split)";
  for (const auto& c : s.cases) {
    EXPECT_EQ(c.ssm_cp, SsmCpStrategy::state_passing);
    EXPECT_NE(c.name().find("/state_passing"), std::string::npos) << c.name();
  }
  const ScenarioSpec both =
      parse_scenario(model + "sweep: {cp: 2, ssm_cp: [hidden_parallel, state_passing]}\n", "x.yaml");
  ASSERT_EQ(both.cases.size(), 2u);
  EXPECT_EQ(both.cases[0].ssm_cp, SsmCpStrategy::hidden_parallel);
  EXPECT_EQ(both.cases[0].name().find("state_passing"), std::string::npos) << "the default keeps its old name";
  const ScenarioSpec dflt = parse_scenario(model + "sweep: {cp: 2}\n", "x.yaml");
  EXPECT_EQ(dflt.cases[0].ssm_cp, SsmCpStrategy::hidden_parallel);
  const ScenarioSpec over = parse_scenario(model + "sweep: {cp: 2}\n", "x.yaml", {"ssm_cp=state_passing"});
  EXPECT_EQ(over.cases[0].ssm_cp, SsmCpStrategy::state_passing);

  const auto refusal = [&](const std::string& yaml) {
    try {
      (void)parse_scenario(yaml, "x.yaml");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string striped = refusal(model + "sweep: {sharder: striped, cp: 2, ssm_cp: state_passing}\n");
  EXPECT_NE(striped.find("x.yaml: striped/allgather/cp2/causal/float64/state_passing: ssm_cp state_passing: layout "
                         "striped"),
            std::string::npos)
      << striped;
  EXPECT_NE(refusal(model + "sweep: {cp: 2, ssm_cp: ring}\n").find("sweep.ssm_cp"), std::string::npos);
  EXPECT_NE(refusal("sweep: {cp: 2, ssm_cp: state_passing}\n").find("needs a model with Mamba layers"),
            std::string::npos);
  EXPECT_NE(refusal(model + "sweep: {cp: 3}\n").find("not divisible by cp 3"), std::string::npos);
}

// ---- the layer, W ranks as threads over Gloo ----

namespace {

struct Stream {
  GlobalLayout g;
  TokenMeta meta;  // [R, P] in global order
};

// Unpacked: `rows` rows of `docs` each (the same lengths, shifted per row), padded by the layout.
// Packed (thd): one stream of `docs[0]`'s documents, each padded by the layout.
Stream make_stream(const std::string& layout, int64_t W, const std::vector<std::vector<int64_t>>& docs) {
  const auto lay = make_layout(layout);
  LayoutRequest req;
  req.cp = W;
  Stream st;
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

SsmParams draw_params(const SsmConfig& c, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  SsmParams p;
  p.conv_w = at::normal(0.0, 0.5, {c.conv_channels(), c.conv}, gen, o);
  p.conv_b = at::normal(0.0, 0.1, {c.conv_channels()}, gen, o);
  p.dt_bias = at::normal(-1.0, 0.5, {c.heads}, gen, o);
  p.A_log = at::normal(0.0, 0.5, {c.heads}, gen, o);
  p.D = at::normal(1.0, 0.1, {c.heads}, gen, o);
  return p;
}

std::vector<at::Tensor> leaves(const SsmParams& p) { return {p.conv_w, p.conv_b, p.dt_bias, p.A_log, p.D}; }

SsmParams as_leaves(const SsmParams& p, at::ScalarType dtype) {
  const auto f = [&](const at::Tensor& t) { return t.to(dtype).detach().requires_grad_(true); };
  return {f(p.conv_w), f(p.conv_b), f(p.dt_bias), f(p.A_log), f(p.D)};
}

struct LayerRun {
  at::Tensor y, proj_grad;                // [R, P, ...] in global order
  std::vector<at::Tensor> param_grads;   // summed over ranks
  std::vector<int64_t> bytes;            // per rank
  std::vector<int64_t> expected_bytes;   // per rank, ssm_cp_costs
  int64_t host_tensors_in_layers = 0;
};

// The layer over `st` on W threads (a Gloo group over a HashStore), loss = sum(y * wy).
LayerRun run_cp(const Stream& st, const SsmConfig& c, const SsmParams& p64, const at::Tensor& proj,
                const at::Tensor& wy, const MaskSpec& mask, at::ScalarType dtype, SsmCpOptions options) {
  const int64_t W = st.g.cp, R = st.meta.batch(), P = st.g.padded_seq_len;
  std::vector<int64_t> rank_order;
  for (const auto& r : st.g.ranks) rank_order.insert(rank_order.end(), r.begin(), r.end());
  const TokenMeta all_meta = st.meta.index_select(1, at::tensor(rank_order, at::kLong));
  auto store = c10::make_intrusive<c10d::HashStore>();
  LayerRun out;
  out.y = at::zeros({R, P, c.d_inner()}, at::kDouble);
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
        auto pg = comm::ProcessGroup::create(store, "ssm", ranks, static_cast<int>(r), comm::BackendKind::gloo,
                                             std::chrono::seconds(30));
        const comm::Communicator cm(pg.backend_ptr());
        const at::Tensor mine = at::tensor(st.g.ranks[static_cast<size_t>(r)], at::kLong);
        SsmCpOptions o = options;
        o.drop_incoming_state = options.drop_incoming_state && r == W - 1;
        SsmStepContext ctx = cp_ssm_context(cm, st.g, all_meta, mask, c, dtype, at::kCPU, "cp:test", o);
        int64_t sent = 0;
        ctx.bytes_sent = &sent;
        const SsmParams params = as_leaves(p64, dtype);
        const at::Tensor x = proj.index_select(1, mine).to(dtype).detach().requires_grad_(true);
        cm.barrier();  // every rank's context is built
        before[static_cast<size_t>(r)] = ssm_host_tensors_built();
        const at::Tensor y = mamba_ssm_forward(x, params, c, ctx);
        (y.to(at::kDouble) * wy.index_select(1, mine)).sum().backward();
        cm.barrier();  // every rank's layer ran forward and backward
        after[static_cast<size_t>(r)] = ssm_host_tensors_built();
        std::lock_guard<std::mutex> lock(mu);
        out.y.index_copy_(1, mine, y.detach().to(at::kDouble));
        out.proj_grad.index_copy_(1, mine, x.grad().to(at::kDouble));
        const auto ps = leaves(params);
        for (size_t i = 0; i < ps.size(); ++i) out.param_grads[i] += ps[i].grad().to(at::kDouble);
        out.bytes[static_cast<size_t>(r)] = sent;
        out.expected_bytes[static_cast<size_t>(r)] = ssm_cp_bytes(ctx.strategy, ctx.shape).total();
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

LayerRun run_single(const Stream& st, const SsmConfig& c, const SsmParams& p64, const at::Tensor& proj,
                    const at::Tensor& wy, const MaskSpec& mask, at::ScalarType dtype) {
  const SsmStepContext ctx = single_rank_ssm_context(st.meta, mask, c, dtype, at::kCPU);
  const SsmParams params = as_leaves(p64, dtype);
  const at::Tensor x = proj.to(dtype).detach().requires_grad_(true);
  const at::Tensor y = mamba_ssm_forward(x, params, c, ctx);
  (y.to(at::kDouble) * wy).sum().backward();
  LayerRun out;
  out.y = y.detach().to(at::kDouble);
  out.proj_grad = x.grad().to(at::kDouble);
  for (const auto& t : leaves(params)) out.param_grads.push_back(t.grad().to(at::kDouble));
  return out;
}

// max |a - b| / max |b|: the worst element against the tensor's scale.
double rel_error(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-300, b.abs().max().item<double>());
}

double tolerance(at::ScalarType dtype) {
  return dtype == at::kDouble ? 1e-10 : dtype == at::kFloat ? 1e-4 : 3e-2;
}

struct Compared {
  double y = 0, proj_grad = 0, param_grad = 0;
  [[nodiscard]] double worst() const { return std::max({y, proj_grad, param_grad}); }
};

Compared compare(const LayerRun& got, const LayerRun& ref) {
  Compared c;
  c.y = rel_error(got.y, ref.y);
  c.proj_grad = rel_error(got.proj_grad, ref.proj_grad);
  for (size_t i = 0; i < ref.param_grads.size(); ++i)
    c.param_grad = std::max(c.param_grad, rel_error(got.param_grads[i], ref.param_grads[i]));
  return c;
}

struct LayerCase {
  std::string layout;
  int64_t W;
  std::string mask;
  at::ScalarType dtype;
  SsmCpStrategy strategy = SsmCpStrategy::state_passing;
};

std::vector<std::vector<int64_t>> docs_for(const std::string& layout) {
  // Unpacked: two rows, document starts at and away from chunk boundaries. thd: documents of lengths no
  // multiple of 2W, so pad slots sit inside the stream between documents.
  if (make_layout(layout)->packed()) return {{29, 7, 40, 13}};
  return {{37, 11, 30, 17}, {52, 20, 23}};
}

// Runs one case; returns the comparison, checks the bytes and the host-tensor count.
Compared check_layer(const LayerCase& k, const SsmConfig& c, bool drop_state = false) {
  const Stream st = make_stream(k.layout, k.W, docs_for(k.layout));
  const int64_t R = st.meta.batch(), P = st.g.padded_seq_len;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(77);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor proj = at::normal(0.0, 1.0, {R, P, c.in_proj_width()}, gen, o);
  const at::Tensor wy = at::normal(0.0, 1.0, {R, P, c.d_inner()}, gen, o);
  const SsmParams p = draw_params(c, 5);
  const MaskSpec mask = MaskSpec::parse(k.mask);
  SsmCpOptions opt;
  opt.strategy = k.strategy;
  opt.drop_incoming_state = drop_state;
  const LayerRun got = run_cp(st, c, p, proj, wy, mask, k.dtype, opt);
  const LayerRun ref = run_single(st, c, p, proj, wy, mask, k.dtype);
  for (int64_t r = 0; r < k.W; ++r)
    EXPECT_EQ(got.bytes[static_cast<size_t>(r)], got.expected_bytes[static_cast<size_t>(r)])
        << "rank " << r << ": the layer's count against ssm_cp_costs";
  EXPECT_GT(got.bytes[0], 0);
  EXPECT_EQ(got.host_tensors_in_layers, 0) << "a layer built a host tensor (index map or plan) for the device";
  return compare(got, ref);
}

std::string label(const LayerCase& k) {
  return k.layout + "/W" + std::to_string(k.W) + "/" + k.mask + "/" + dtype_name(k.dtype) + "/" + to_string(k.strategy);
}

// Nemotron-H-like proportions at test size: 4 heads in 2 groups, conv 4.
SsmConfig test_config() { return SsmConfig{4, 8, 8, 2, 4}; }

}  // namespace

TEST(SsmStatePassing, MatchesTheSingleRankLayerOnEveryChunkedLayout) {
  const SsmConfig c = test_config();
  // Each layout at W = 2, 3, 4, alternating the mask (both masks at every W over the layouts).
  int i = 0;
  for (const auto& layout : {"contiguous", "load_balanced", "thd", "sdpa_wrap", "workload_balanced"})
    for (int64_t W : {2, 3, 4}) {
      const LayerCase k{layout, W, i++ % 2 == 0 ? "document" : "causal", at::kDouble};
      const Compared d = check_layer(k, c);
      EXPECT_LT(d.worst(), tolerance(k.dtype))
          << label(k) << ": y " << d.y << " dL/dproj " << d.proj_grad << " dL/dparams " << d.param_grad;
    }
}

TEST(SsmStatePassing, LowPrecisionAndAConvOfOne) {
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    const LayerCase k{"load_balanced", 4, "document", dtype};
    const Compared d = check_layer(k, test_config());
    EXPECT_LT(d.worst(), tolerance(dtype)) << label(k) << ": y " << d.y << " dL/dproj " << d.proj_grad
                                           << " dL/dparams " << d.param_grad;
  }
  const LayerCase k{"thd", 3, "document", at::kDouble};
  const Compared d = check_layer(k, SsmConfig{3, 8, 4, 1, 1});
  EXPECT_LT(d.worst(), tolerance(at::kDouble)) << "conv 1 (no halo): " << label(k);
}

TEST(SsmStatePassing, HiddenParallelThroughTheSameHarness) {
  for (const auto& layout : {"load_balanced", "thd"})
    for (int64_t W : {2, 4}) {
      const LayerCase k{layout, W, "document", at::kDouble, SsmCpStrategy::hidden_parallel};
      const Compared d = check_layer(k, test_config());
      EXPECT_LT(d.worst(), tolerance(k.dtype)) << label(k);
    }
}

// The negative control: the last rank ignores the state arriving at its chunks. The outputs and the
// gradients must differ from the reference far beyond the tolerance.
TEST(SsmStatePassing, DroppedIncomingStateIsCaught) {
  for (int64_t W : {2, 4}) {
    const LayerCase k{"load_balanced", W, "causal", at::kDouble};
    const Compared d = check_layer(k, test_config(), /*drop_state=*/true);
    EXPECT_GT(d.y, 1e3 * tolerance(k.dtype)) << label(k);
    EXPECT_GT(d.param_grad, 1e3 * tolerance(k.dtype)) << label(k);
  }
}
