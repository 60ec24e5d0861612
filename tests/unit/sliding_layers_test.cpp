// Per-layer attention kinds and the windowed ring (issue 36, items 2 and 3), on one process: the halo a
// sliding window needs per layout (window_halo.hpp) against hand-counted truth, the issue's contiguous
// step count 1 + ceil((N-1)/c) with the window's edge just before, on and just after a chunk boundary,
// head-tail's neighbour halos, the windowed ring's bytes equal at S = 2048 and 8192 for a fixed window
// (a full ring's grow 4x), its W = 1 form against the reference, the model calling each kind's attention,
// and the scenario keys with their refusals. Multi-rank agreement with the single rank (every unpacked
// layout, W = 2, 3, 4, float64 and bf16): scenarios/sliding_layers.yaml (CTest scenario_sliding_layers).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "harness/model/model.hpp"
#include "harness/runner/scenario.hpp"
#include "kernels/attention/reference.hpp"
#include "kernels/comm/communicator.hpp"
#include "kernels/transports/transport.hpp"
#include "kernels/transports/window_halo.hpp"
#include "sharders/core/check.hpp"
#include "sharders/layout.hpp"
#include "sharders/registry.hpp"
#include "tests/unit/plan_test_util.hpp"

namespace cpbench {
namespace {

using kernels::window_halo;
using kernels::WindowHalo;
using plan_test::find_case;
using plan_test::request;

std::vector<std::vector<int64_t>> layout_ranks(const std::string& layout, int64_t W, int64_t S) {
  LayoutRequest req;
  req.cp = W;
  req.seq_len = S;
  return make_layout(layout)->compute(req).ranks;
}

// Contiguous, W = 4, c = 40: the window's edge N - 1 keys back from a chunk's first query.
TEST(WindowHalo, ContiguousStepsAreOnePlusCeilOfTheWindowOverTheChunk) {
  const int64_t W = 4, c = 40;
  const auto ranks = layout_ranks("contiguous", W, W * c);
  struct Row {
    int64_t window;
    std::vector<int> steps;
    int64_t from_rank0;  // tokens rank 0 sends (min(N - 1, (W - 1) c))
    int64_t last_step;   // tokens sent at the last step
  };
  // N - 1 = 39: just before the boundary; 40: on it; 41: just after (one key of the chunk two back);
  // 80: on the second boundary; 200: past every rank (capped at W - 1 steps).
  for (const Row& row : {Row{40, {1}, 39, 39}, Row{41, {1}, 40, 40}, Row{42, {1, 2}, 41, 1}, Row{81, {1, 2}, 80, 40},
                         Row{200, {1, 2, 3}, 120, 40}}) {
    const WindowHalo h = window_halo(ranks, row.window);
    EXPECT_EQ(h.steps(), row.steps) << "N = " << row.window;
    const int64_t ceil_steps = std::min<int64_t>(W - 1, (row.window - 1 + c - 1) / c);
    EXPECT_EQ(static_cast<int64_t>(h.steps().size()), ceil_steps) << "N = " << row.window;
    EXPECT_EQ(h.sent_by(0), row.from_rank0) << "N = " << row.window;
    EXPECT_EQ(h.sent[0][static_cast<size_t>(row.steps.back() - 1)], row.last_step) << "N = " << row.window;
    EXPECT_EQ(h.sent_by(W - 1), 0) << "the last rank's keys are nobody's past";
    EXPECT_EQ(h.received_by(0), 0) << "rank 0 has no past";
    EXPECT_EQ(h.received_by(W - 1), std::min<int64_t>(row.window - 1, (W - 1) * c));
  }
}

// Head-tail (load_balanced), W = 4, c = 20: rank r owns chunks r and 7 - r. A window inside one chunk
// needs the previous front chunk (rank r - 1, step 1) and the next rank's back chunk (rank r + 1, step
// W - 1): the neighbours' halos. Rank 3's back chunk 4 follows its own front chunk 3: nothing to fetch.
TEST(WindowHalo, HeadTailNeedsBothNeighboursHalos) {
  const auto ranks = layout_ranks("load_balanced", 4, 160);
  const WindowHalo h = window_halo(ranks, 11);
  EXPECT_EQ(h.steps(), (std::vector<int>{1, 3}));
  // Rank 0 sends its front chunk's last 10 keys to rank 1 (step 1); its back chunk 7 is the last.
  EXPECT_EQ(h.sent[0], (std::vector<int64_t>{10, 0, 0}));
  // Rank 1: front chunk 1 -> rank 2 (step 1); back chunk 6 -> rank 0 (step 3, whose chunk 7 follows it).
  EXPECT_EQ(h.sent[1], (std::vector<int64_t>{10, 0, 10}));
  // Rank 3: front chunk 3 -> nobody else (chunk 4 is its own); back chunk 4 -> rank 2 (chunk 5).
  EXPECT_EQ(h.sent[3], (std::vector<int64_t>{0, 0, 10}));
  EXPECT_EQ(h.received_by(0), 10);
  EXPECT_EQ(h.received_by(3), 10);
  EXPECT_EQ(h.received_by(1), 20);
}

// The issue's example: S = 128K, W = 8, N = 4096, contiguous: a halo of 4 095 tokens against a full
// ring's (W - 1) S / W = 114 688.
TEST(WindowHalo, TheIssuesContiguousExample) {
  const auto ranks = layout_ranks("contiguous", 8, 131072);
  const WindowHalo h = window_halo(ranks, 4096);
  EXPECT_EQ(h.sent_by(0), 4095);
  EXPECT_EQ(h.steps(), (std::vector<int>{1}));
}

// Bytes per rank are set by the window: equal at S = 2048 and 8192 for N = 128 (the ring's grow 4x), on
// the chunked layouts. (Striped is not one: every key lies within N - 1 of some query of every rank.)
TEST(WindowHalo, WindowedRingBytesDoNotGrowWithS) {
  const auto ring_window = make_transport("ring_window");
  for (const std::string layout : {"contiguous", "load_balanced"}) {
    std::vector<int64_t> windowed, ring;
    for (int64_t S : {2048, 8192}) {
      const int64_t W = 4;
      const WindowHalo h = window_halo(layout_ranks(layout, W, S), 128);
      int64_t most = 0;
      for (int r = 0; r < W; ++r) {
        CallShape c{W, 1, 8, 2, S / W, 64, 2};
        c.halo_sent = h.sent_by(r);
        c.halo_received = h.received_by(r);
        c.halo_steps = h.steps_of(r);
        most = std::max(most, ring_window->bytes_per_call(c));
        EXPECT_LE(ring_window->forward_bytes_per_call(c), ring_window->bytes_per_call(c));
      }
      windowed.push_back(most);
      ring.push_back(make_transport("ring")->bytes_per_call(CallShape{W, 1, 8, 2, S / W, 64, 2}));
    }
    EXPECT_GT(windowed[0], 0) << layout;
    EXPECT_EQ(windowed[0], windowed[1]) << layout << ": S = 2048 vs 8192";
    EXPECT_EQ(ring[1], 4 * ring[0]);
    EXPECT_LT(windowed[0], ring[0] / 4) << layout;
  }
}

// The planner prices ring_window from the same formulas: at 128K, cp 8, a window of 4096, contiguous, its
// bytes per rank are the halo's (4 095 tokens, the same at 32K), far below the ring's; under a causal mask
// it is not planned (with a note).
TEST(WindowHalo, ThePlannerPricesTheWindowedRing) {
  std::vector<int64_t> bytes;
  for (int64_t S : {32768, 131072}) {
    plan::PlanRequest r = request("llama3-8b", S, {8}, "sliding_window:4096");
    r.sharders = {"contiguous", "load_balanced"};
    r.transports = {"ring", "ring_window"};
    const plan::Plan p = plan::make_plan(r);
    const plan::PlanCase& w = find_case(p, "contiguous", "ring_window", 8);
    // Llama-3-8B: 32 layers, 8 kv heads of 128, bf16; the middle ranks send 4095 tokens and receive 4095.
    const int64_t kvt = 2 * 8 * 128 * 2, dkvt = 2 * 8 * 128 * 4;
    EXPECT_EQ(w.bytes_per_rank, 32 * (4095 * kvt + 4095 * dkvt)) << S;
    EXPECT_LT(w.bytes_per_rank * 4, find_case(p, "contiguous", "ring", 8).bytes_per_rank) << S;
    EXPECT_LT(find_case(p, "load_balanced", "ring_window", 8).bytes_per_rank,
              find_case(p, "load_balanced", "ring", 8).bytes_per_rank);
    bytes.push_back(w.bytes_per_rank);
  }
  EXPECT_EQ(bytes[0], bytes[1]);
  plan::PlanRequest causal = request("llama3-8b", 32768, {8});
  causal.transports = {"ring", "ring_window"};
  const plan::Plan p = plan::make_plan(causal);
  for (const auto& c : p.cases) EXPECT_NE(c.transport, "ring_window");
  bool noted = false;
  for (const auto& n : p.notes)
    noted = noted || n.find("ring_window not planned: ring_window runs sliding_window") == 0;
  EXPECT_TRUE(noted);
}

TEST(WindowHalo, RefusesPositionsThatDoNotTile) {
  EXPECT_THROW((void)window_halo({{0, 1}, {3, 4}}, 2), Error);
  EXPECT_THROW((void)window_halo({{0, 1}, {2, 3}}, 0), Error);
}

// W = 1: ring_window is one block on the sliding mask, equal to the reference; other masks are refused.
TEST(WindowedRing, WorldOfOneMatchesTheReferenceAndRefusesOtherMasks) {
  const auto t = make_transport("ring_window");
  EXPECT_NE(t->unsupported_reason(MaskSpec::parse("causal"), at::TensorOptions().dtype(at::kDouble), 2)
                .find("sliding_window masks only"),
            std::string::npos);
  EXPECT_EQ(t->unsupported_reason(MaskSpec::parse("sliding_window:5"), at::TensorOptions().dtype(at::kDouble), 2), "");
  EXPECT_NE(t->unsupported_layout(*make_layout("thd")), "");
  EXPECT_EQ(t->unsupported_layout(*make_layout("contiguous")), "");
  const comm::Communicator world;
  at::manual_seed(3);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor q = at::randn({1, 4, 12, 8}, o), k = at::randn({1, 2, 12, 8}, o), v = at::randn({1, 2, 12, 8}, o);
  TokenMeta meta{at::arange(12, at::kLong).unsqueeze(0), {}, {}, {}};
  const MaskSpec mask = MaskSpec::parse("sliding_window:5");
  AttentionContext ctx{&world, mask, meta, meta, 0, nullptr, "", nullptr, false};
  const at::Tensor out = t->attend(q, k, v, ctx);
  const at::Tensor ref = local_attention(q, k, v, meta, meta, mask, 0);
  EXPECT_LT((out - ref).abs().max().item<double>(), 1e-12);
  const at::Tensor causal = local_attention(q, k, v, meta, meta, MaskSpec::parse("causal"), 0);
  EXPECT_GT((out - causal).abs().max().item<double>(), 1e-3) << "the window must cut keys off";
  EXPECT_THROW(
      (void)t->attend(q, k, v,
                      AttentionContext{&world, MaskSpec::parse("causal"), meta, meta, 0, nullptr, "", nullptr, false}),
      Error);
}

// Each layer calls its kind's attention; a sliding layer without one is refused, never run as full.
TEST(SlidingLayers, ModelCallsEachKindsAttention) {
  ModelConfig c = ModelConfig::preset_named("tiny");
  c.layers = 3;
  c.attention.layer_kinds = {AttentionKind::sliding, AttentionKind::full, AttentionKind::sliding};
  c.attention.window = 4;
  TinyTransformer model(c, at::kDouble, at::kCPU);
  int full = 0, sliding = 0;
  const AttentionFn full_fn = [&](const at::Tensor& q, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) {
    ++full;
    return q.clone();
  };
  const AttentionFn sliding_fn = [&](const at::Tensor& q, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&) {
    ++sliding;
    return q.clone();
  };
  const at::Tensor ids = at::arange(8, at::kLong).unsqueeze(0), pos = at::arange(8, at::kLong).unsqueeze(0);
  (void)model->forward(ids, std::nullopt, pos, full_fn, {}, &sliding_fn);
  EXPECT_EQ(full, 1);
  EXPECT_EQ(sliding, 2);
  EXPECT_THROW((void)model->forward(ids, std::nullopt, pos, full_fn), Error);
  ModelConfig bad = c;
  bad.attention.layer_kinds.pop_back();
  EXPECT_THROW(bad.validate(), UsageError);
  bad = c;
  bad.attention.window = 0;
  EXPECT_THROW(bad.validate(), UsageError);
}

std::string error_of(const std::string& yaml) {
  try {
    (void)parse_scenario(yaml, "scenarios/x.yaml");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(SlidingLayers, ScenarioKeysAndTheirRefusals) {
  const std::string model =
      "model: {preset: tiny, attention: {layer_types: [sliding_attention, full_attention], window: 9}}\n";
  const ScenarioSpec s = parse_scenario(
      model + "sweep: {sharder: contiguous, transport: ring, transport_sliding: [ring_window, allgather], cp: 2}\n",
      "x.yaml");
  ASSERT_EQ(s.cases.size(), 2u);
  EXPECT_EQ(s.cases[0].name(), "contiguous/ring/cp2/causal/float64/sliding-ring_window");
  EXPECT_EQ(s.cases[0].sliding_mask, MaskSpec::parse("sliding_window:9"));
  EXPECT_EQ(s.cases[1].transport_of_sliding(), "allgather");
  EXPECT_EQ(s.model.attention.layer_kinds, (std::vector<AttentionKind>{AttentionKind::sliding, AttentionKind::full}));
  // Without transport_sliding the name is what it always was.
  EXPECT_EQ(parse_scenario(model + "sweep: {sharder: contiguous, transport: ring, cp: 2}\n", "x.yaml").cases[0].name(),
            "contiguous/ring/cp2/causal/float64");
  const std::string unknown =
      error_of("model: {preset: tiny, attention: {layer_types: [sliding_attention, local_attention], window: 9}}\n");
  EXPECT_NE(unknown.find("model.attention.layer_types[1]: unknown attention kind \"local_attention\"; known: "
                         "full_attention, sliding_attention"),
            std::string::npos)
      << unknown;
  const std::string count =
      error_of("model: {preset: tiny, attention: {layer_types: [sliding_attention], window: 9}}\n");
  EXPECT_NE(count.find("model.attention.layer_types: 1 kinds for the model's 2 attention layers"), std::string::npos)
      << count;
  const std::string no_window =
      error_of("model: {preset: tiny, attention: {layer_types: [sliding_attention, full_attention]}}\n");
  EXPECT_NE(no_window.find("model.attention.window: missing"), std::string::npos) << no_window;
  const std::string stray_window = error_of("model: {preset: tiny, attention: {window: 9}}\n");
  EXPECT_NE(stray_window.find("model.attention.window: the model has no sliding_attention layers"), std::string::npos)
      << stray_window;
  const std::string stray_transport =
      error_of("sweep: {sharder: contiguous, transport: ring, transport_sliding: ring_window, cp: 2}\n");
  EXPECT_NE(stray_transport.find("sweep.transport_sliding: the model has no sliding_attention layers"),
            std::string::npos)
      << stray_transport;
  // Under mask: document a sliding layer runs the window within its document; a full mask has no
  // windowed twin.
  const ScenarioSpec docs =
      parse_scenario(model + "sweep: {sharder: contiguous, transport: ring, cp: 2, mask: document}\n", "x.yaml");
  EXPECT_EQ(docs.cases.at(0).sliding_mask, MaskSpec::parse("document+sliding_window:9"));
  EXPECT_EQ(docs.cases.at(0).mask, MaskSpec::parse("document"));
  const std::string full_mask = error_of(model + "sweep: {sharder: contiguous, transport: ring, cp: 2, mask: full}\n");
  EXPECT_NE(full_mask.find("sweep.mask: the model has sliding_attention layers"), std::string::npos) << full_mask;
  EXPECT_NE(full_mask.find("must be causal or document, got full"), std::string::npos) << full_mask;
  const std::string bad_transport =
      error_of(model + "sweep: {sharder: contiguous, transport: ring, transport_sliding: pigeon, cp: 2}\n");
  EXPECT_NE(bad_transport.find("for sliding-window layers: ring_window"), std::string::npos) << bad_transport;
  const std::string hybrid =
      error_of(model + "sweep: {sharder: contiguous, transport: ring, transport_sliding: hybrid, cp: 2}\n");
  EXPECT_NE(hybrid.find("sweep.transport_sliding: hybrid takes a Ulysses degree"), std::string::npos) << hybrid;
}

// A Hugging Face config's layer_types and sliding_window become the test model's kinds and window.
TEST(SlidingLayers, KindsFromAHuggingFaceConfig) {
  // Plain C file calls: std::filesystem's remove_all resolves into libtorch's copy here and crashes.
  const std::string file = "/tmp/cpbench_sliding_" + std::to_string(::getpid()) + ".json";
  std::ofstream(file) << R"({"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4, "head_dim": 16,
    "num_key_value_heads": 2, "num_hidden_layers": 3, "intermediate_size": 128, "vocab_size": 256,
    "sliding_window": 7, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]})";
  const ScenarioSpec s = parse_scenario("model: {config: " + file + "}\n", "x.yaml");
  std::remove(file.c_str());
  EXPECT_EQ(s.model.attention.layer_kinds,
            (std::vector<AttentionKind>{AttentionKind::sliding, AttentionKind::full, AttentionKind::sliding}));
  EXPECT_EQ(s.model.attention.window, 7);
  EXPECT_EQ(s.cases.at(0).sliding_mask, MaskSpec::parse("sliding_window:7"));
}

}  // namespace
}  // namespace cpbench
