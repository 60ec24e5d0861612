// DeepSeek Sparse Attention (model.attention.dsa; kernels/mixers/attention/dsa/) on one process: the
// top-k's tie rule against a brute-force oracle and hand-written rows (score descending, then key index
// ascending; -1 for invisible picks), the indexer score against its formula written out, sparse MLA
// against the plain reference attention (dense when k covers every visible key; and restricted to the
// picks), the indexer KL against a hand computation, DSA's formulas (DeepSeek-V3.2's 704 wire values per
// token, the per-token FLOPs at 128K), the scenario key and its refusals. Multi-rank agreement on every
// layout with the picks, the loss and every gradient: scenarios/dsa*.yaml (CTest scenario_dsa*).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/model/hf_config.hpp"
#include "harness/model/model.hpp"
#include "harness/runner/scenario.hpp"
#include "kernels/attention/mla.hpp"
#include "kernels/attention/reference.hpp"
#include "kernels/mixers/attention/dsa/dsa.hpp"
#include "kernels/mixers/attention/dsa/dsa_context.hpp"
#include "kernels/mixers/attention/dsa/dsa_costs.hpp"
#include "sharders/mask.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {
namespace {

namespace dsa = kernels::dsa;

at::Tensor all_visible(int64_t b, int64_t q, int64_t k) { return at::ones({b, q, k}, at::kBool); }

TEST(DsaTopk, TiesGoToTheLowerKeyIndexAndInvisiblePicksAreMinusOne) {
  // One query, six keys: scores 0, 2, 0, 2, -1, 0 (exact ties at 2 and at 0).
  const at::Tensor s = at::tensor({0.0, 2.0, 0.0, 2.0, -1.0, 0.0}, at::kDouble).view({1, 1, 6});
  EXPECT_TRUE(dsa::select_topk(s, all_visible(1, 1, 6), 4).equal(at::tensor({1, 3, 0, 2}, at::kLong).view({1, 1, 4})));
  // Key 1 invisible: the next best by score, ties by index.
  at::Tensor vis = all_visible(1, 1, 6);
  vis.index_put_({0, 0, 1}, false);
  EXPECT_TRUE(dsa::select_topk(s, vis, 4).equal(at::tensor({3, 0, 2, 5}, at::kLong).view({1, 1, 4})));
  // Only two keys visible, k = 4: two picks, then -1.
  vis = at::zeros({1, 1, 6}, at::kBool);
  vis.index_put_({0, 0, 4}, true);
  vis.index_put_({0, 0, 2}, true);
  EXPECT_TRUE(dsa::select_topk(s, vis, 4).equal(at::tensor({2, 4, -1, -1}, at::kLong).view({1, 1, 4})));
  // k larger than the row: k_eff = the row's keys.
  EXPECT_EQ(dsa::select_topk(s, all_visible(1, 1, 6), 64).size(2), 6);
}

TEST(DsaTopk, EqualsTheBruteForceOracleOnRowsFullOfTies) {
  // Scores from {-1, 0, 0, 0, 1, 2} (half of them exact zeros), a causal mask: the oracle sorts (score
  // descending, index ascending) pairs by hand.
  at::manual_seed(7);
  const int64_t B = 2, S = 40, k = 9;
  const at::Tensor table = at::tensor({-1.0, 0.0, 0.0, 0.0, 1.0, 2.0}, at::kDouble);
  const at::Tensor s = table.index_select(0, at::randint(6, {B * S * S}, at::kLong)).view({B, S, S});
  const at::Tensor vis = at::ones({S, S}, at::kBool).tril().unsqueeze(0).expand({B, S, S}).contiguous();
  const at::Tensor got = dsa::select_topk(s, vis, k);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t q = 0; q < S; ++q) {
      std::vector<std::pair<double, int64_t>> keys;
      for (int64_t j = 0; j <= q; ++j) keys.emplace_back(-s[b][q][j].item<double>(), j);
      std::sort(keys.begin(), keys.end());
      for (int64_t i = 0; i < k; ++i) {
        const int64_t want = i < static_cast<int64_t>(keys.size()) ? keys[static_cast<size_t>(i)].second : -1;
        ASSERT_EQ(got[b][q][i].item<int64_t>(), want) << "b " << b << " q " << q << " pick " << i;
      }
    }
}

TEST(DsaIndexer, ScoreIsTheWeightedSumOfReluDots) {
  at::manual_seed(3);
  const int64_t B = 1, Sq = 3, Sk = 5, H = 2, d = 4;
  const at::Tensor q = at::randn({B, Sq, H, d}, at::kDouble), k = at::randn({B, Sk, d}, at::kDouble);
  const at::Tensor w = at::randn({B, Sq, H}, at::kDouble);
  const at::Tensor got = dsa::index_scores(q, w, k, true), plain = dsa::index_scores(q, w, k, false);
  for (int64_t t = 0; t < Sq; ++t)
    for (int64_t s = 0; s < Sk; ++s) {
      double want = 0, want_plain = 0;
      for (int64_t h = 0; h < H; ++h) {
        const double dot = (q[0][t][h] * k[0][s]).sum().item<double>() / 2.0;  // d^-0.5 = 1/2
        want += w[0][t][h].item<double>() * std::max(0.0, dot);
        want_plain += w[0][t][h].item<double>() * dot;
      }
      EXPECT_NEAR(got[0][t][s].item<double>(), want, 1e-12);
      EXPECT_NEAR(plain[0][t][s].item<double>(), want_plain, 1e-12);
    }
  EXPECT_EQ(dsa::index_scores(q.to(at::kBFloat16), w.to(at::kFloat), k.to(at::kBFloat16), true).scalar_type(),
            at::kFloat);
}

struct MlaCase {
  int64_t B = 1, H = 3, S = 24, dn = 6, dr = 4, dv = 5, r = 8;
  at::Tensor q, latent, w_up;
  explicit MlaCase(uint64_t seed) {
    at::manual_seed(seed);
    q = at::randn({B, H, S, dn + dr}, at::kDouble).requires_grad_(true);
    latent = at::randn({B, S, r + dr}, at::kDouble).requires_grad_(true);
    w_up = (at::randn({H * (dn + dv), r}, at::kDouble) * 0.3).requires_grad_(true);
  }
  [[nodiscard]] double scale() const { return 1.0 / std::sqrt(static_cast<double>(dn + dr)); }
  // The reference attention over the keys `mask` [B, S, S] admits, with MLA's expanded K and V.
  [[nodiscard]] at::Tensor dense(const at::Tensor& mask) const {
    const auto [k, v] = kernels::mla_expand(latent, w_up, H, dn);
    return kernels::reference_attention(q, k, v, mask, scale());
  }
};

void expect_same_grads(const at::Tensor& a, const at::Tensor& b, const MlaCase& c) {
  const at::Tensor g = at::randn(a.sizes(), a.options());
  const auto grads = [&](const at::Tensor& out) {
    return torch::autograd::grad({out}, {c.q, c.latent, c.w_up}, {g}, /*retain_graph=*/true);
  };
  const auto ga = grads(a), gb = grads(b);
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_TRUE(at::allclose(ga[i], gb[i], 1e-10, 1e-12)) << "gradient " << i;
}

TEST(DsaSparseMla, EqualsDenseMlaWhenKCoversEveryVisibleKey) {
  const MlaCase c(11);
  const at::Tensor causal = at::ones({c.S, c.S}, at::kBool).tril().unsqueeze(0);
  const at::Tensor scores = at::randn({c.B, c.S, c.S}, at::kDouble);
  const at::Tensor picks = dsa::select_topk(scores, causal, c.S);  // every visible key
  const at::Tensor sparse = dsa::sparse_mla(c.q, c.latent, c.w_up, picks, c.dn, c.scale()).out;
  const at::Tensor dense = c.dense(causal);
  EXPECT_TRUE(at::allclose(sparse, dense, 1e-10, 1e-12)) << (sparse - dense).abs().max().item<double>();
  expect_same_grads(sparse, dense, c);
}

TEST(DsaSparseMla, EqualsTheReferenceRestrictedToThePicks) {
  const MlaCase c(12);
  const int64_t k = 5;
  const at::Tensor causal = at::ones({c.S, c.S}, at::kBool).tril().unsqueeze(0);
  const at::Tensor scores = at::randn({c.B, c.S, c.S}, at::kDouble);
  const at::Tensor picks = dsa::select_topk(scores, causal, k);
  at::Tensor picked = at::zeros({c.B, c.S, c.S + 1}, at::kBool);  // column S catches the -1 picks
  picked.scatter_(2, picks.remainder(c.S + 1), true);
  picked = picked.narrow(2, 0, c.S).contiguous();
  EXPECT_EQ(picked.sum().item<int64_t>(), c.S * k - k * (k - 1) / 2);  // min(k, t + 1) keys per row
  const at::Tensor sparse = dsa::sparse_mla(c.q, c.latent, c.w_up, picks, c.dn, c.scale()).out;
  const at::Tensor dense = c.dense(picked);
  EXPECT_TRUE(at::allclose(sparse, dense, 1e-10, 1e-12)) << (sparse - dense).abs().max().item<double>();
  expect_same_grads(sparse, dense, c);
}

TEST(DsaIndexerLoss, IsTheKlOfTheHeadSummedTargetAgainstTheIndexSoftmax) {
  // Two heads, one query, three keys of which the last is dropped.
  const at::Tensor target = at::tensor({0.0, 1.0, 5.0, 2.0, 0.0, 5.0}, at::kDouble).view({1, 2, 1, 3});
  const at::Tensor index = at::tensor({1.0, -1.0, 7.0}, at::kDouble).view({1, 1, 3}).requires_grad_(true);
  const at::Tensor keep = at::tensor({1, 1, 0}, at::kLong).to(at::kBool).view({1, 1, 3});
  const double e = std::exp(1.0), e2 = std::exp(2.0);
  const double p0 = 0.5 * (1 / (1 + e) + e2 / (1 + e2)), p1 = 1 - p0;
  const double q0 = std::exp(1.0) / (std::exp(1.0) + std::exp(-1.0)), q1 = 1 - q0;
  const double want = p0 * std::log(p0 / q0) + p1 * std::log(p1 / q1);
  const at::Tensor kl = dsa::indexer_kl(target, index, keep);
  EXPECT_NEAR(kl.item<double>(), want, 1e-12);
  kl.sum().backward();
  EXPECT_NEAR(index.grad()[0][0][0].item<double>(), q0 - p0, 1e-12);  // d KL / d logit = q - p
  EXPECT_EQ(index.grad()[0][0][2].item<double>(), 0.0);
  // A row with nothing kept: 0, no NaN.
  EXPECT_EQ(dsa::indexer_kl(target, index.detach(), at::zeros({1, 1, 3}, at::kBool)).item<double>(), 0.0);
}

dsa_costs::DsaDims deepseek_v32() {
  dsa_costs::DsaDims d;
  d.mla = MlaDims{512, 64, 128, 128};
  d.heads = 128;
  d.index_heads = 64;
  d.index_head_dim = 128;
  d.topk = 2048;
  return d;
}

TEST(DsaCosts, DeepSeekV32WireAndFlopsPerTokenAt128K) {
  const auto d = deepseek_v32();
  EXPECT_EQ(dsa_costs::wire_elements_per_token(d), 704);  // 512 + 64 + 128 (dsa.md)
  // 8 ranks, 16K tokens each, bf16: 7 * 16384 * 704 * 2 forward, * 4 backward.
  EXPECT_EQ(dsa_costs::forward_bytes(d, 8, 1, 16384, 2), int64_t{7} * 16384 * 704 * 2);
  EXPECT_EQ(dsa_costs::backward_bytes(d, 8, 1, 16384, 2), int64_t{7} * 16384 * 704 * 4);
  const int64_t T = 131072;
  // dsa.md: indexer ~1.07 GFLOP / token (the dot products; the weighted sum adds 1 / d_I), sparse core
  // ~0.57 (the picks; the per-token absorption adds 0.034), dense MLA core ~5.37.
  EXPECT_NEAR(dsa_costs::indexer_flops_per_token(d, T) / 1e9, 1.07 * 129.0 / 128.0, 0.01);
  const double absorption = 2.0 * 128 * 512 * (128 + 128);
  EXPECT_NEAR((dsa_costs::sparse_core_flops_per_token(d, T) - absorption) / 1e9, 0.57, 0.005);
  EXPECT_NEAR(dsa_costs::dense_core_flops_per_token(d, T) / 1e9, 5.37, 0.005);
  // Flat past k: a query at 128K costs the sparse core what a query at 4K does.
  EXPECT_EQ(dsa_costs::sparse_core_flops(d, 131072), dsa_costs::sparse_core_flops(d, 4096));
  EXPECT_LT(dsa_costs::sparse_core_flops(d, 1000), dsa_costs::sparse_core_flops(d, 2048));
  // Short rows (every key picked): the mean of min(n, k) is the mean of n.
  EXPECT_DOUBLE_EQ(dsa_costs::sparse_core_flops_per_token(d, 1000),
                   dsa_costs::sparse_core_flops(d, 500.5));
}

std::string refusal(const std::string& yaml) {
  try {
    (void)parse_scenario(yaml, "scenarios/x.yaml");
  } catch (const UsageError& e) {
    return e.what();
  }
  return "accepted";
}

// The head-split (a2a) wire at DeepSeek-V3.2's dims, 8 ranks of 16K tokens (N = 128K), bf16, written out by
// hand: 7 other ranks' blocks of 16384 rows; 16 query heads and 8 index heads per rank.
TEST(DsaCosts, HeadSplitWireAtDeepSeekV32Dims) {
  const auto d = deepseek_v32();
  const int64_t rows = int64_t{7} * 16384, n = 131072;
  const auto dense = dsa_costs::head_split_exchanges(d, DsaLoss::dense, 8, 8, 1, 16384, 2);
  const auto sparse = dsa_costs::head_split_exchanges(d, DsaLoss::sparse, 8, 8, 1, 16384, 2);
  ASSERT_EQ(dense.size(), 7U);
  ASSERT_EQ(sparse.size(), 8U);
  const auto find = [](const std::vector<dsa_costs::Exchange>& x, const std::string& name) {
    for (const auto& e : x)
      if (e.name == name) return e;
    ADD_FAILURE() << "no exchange " << name;
    return dsa_costs::Exchange{};
  };
  EXPECT_EQ(find(dense, "q").forward, rows * 16 * 192 * 2);
  EXPECT_EQ(find(dense, "q_I").backward, rows * 8 * 128 * 2);
  EXPECT_EQ(find(dense, "head weights").forward, rows * 8 * 4);  // float32
  EXPECT_EQ(find(dense, "output").backward, rows * 16 * 128 * 2);
  // The price of the head split: every row's whole score, both ways under the dense stage (56 GiB
  // forward per layer per rank here), forward only under the sparse one (the top-k's input).
  EXPECT_EQ(find(dense, "score sum").forward, rows * n * 4);
  EXPECT_EQ(find(dense, "score sum").backward, rows * n * 4);
  EXPECT_EQ(find(sparse, "score sum").backward, 0);
  EXPECT_EQ(find(dense, "picks").forward, rows * 2048 * 8);
  EXPECT_EQ(find(dense, "KL target").forward, rows * n * 4);
  EXPECT_EQ(find(sparse, "KL target").forward, rows * 2048 * 4);
  EXPECT_EQ(find(sparse, "picked score").backward, rows * 2048 * 4);
  // Fewer index heads than ranks: padded with zero heads, one a rank (2 heads over W = 4: 1, 1, 0, 0).
  auto two = d;
  two.index_heads = 2;
  EXPECT_EQ(find(dsa_costs::head_split_exchanges(two, DsaLoss::dense, 4, 4, 1, 100, 8), "q_I").forward,
            int64_t{3} * 100 * 1 * 128 * 8);
  // hybrid, U = 2 of W = 8: one other group rank's block, 64 query heads a rank, every key (N = 128K).
  const auto hybrid = dsa_costs::head_split_exchanges(d, DsaLoss::dense, 8, 2, 1, 16384, 2);
  EXPECT_EQ(find(hybrid, "q").forward, int64_t{16384} * 64 * 192 * 2);
  EXPECT_EQ(find(hybrid, "score sum").forward, int64_t{16384} * n * 4);
  int64_t sum = dsa_costs::forward_bytes(d, 8, 1, 16384, 2) + dsa_costs::backward_bytes(d, 8, 1, 16384, 2);
  for (const auto& e : dense) sum += e.forward + e.backward;
  EXPECT_EQ(dsa_costs::head_split_bytes(d, DsaLoss::dense, 8, 8, 1, 16384, 2), sum);
}

TEST(DsaScenario, KeyAndItsRefusals) {
  const std::string mla = "mla: {kv_lora_rank: 16, qk_rope_head_dim: 8, qk_nope_head_dim: 12, v_head_dim: 10}";
  const auto yaml = [&](const std::string& attention) {
    return "model: {preset: tiny, heads: 4, hidden: 32, attention: {" + attention +
           "}}\nbatch: {batch_size: 1, seq_len: 64}\nsweep: {sharder: load_balanced, transport: allgather, cp: 2}\n";
  };
  const ScenarioSpec s = parse_scenario(
      yaml(mla + ", dsa: {index_heads: 2, index_head_dim: 16, topk: 8, loss: sparse, loss_coeff: 0.5}"), "x.yaml");
  const DsaConfig& d = s.model.attention.dsa;
  EXPECT_EQ(d.index_heads, 2);
  EXPECT_EQ(d.index_head_dim, 16);
  EXPECT_EQ(d.topk, 8);
  EXPECT_TRUE(d.scoring_relu);
  EXPECT_EQ(d.loss, DsaLoss::sparse);
  EXPECT_DOUBLE_EQ(d.loss_coeff, 0.5);
  std::string why = refusal(yaml("dsa: {index_heads: 2, index_head_dim: 16, topk: 8}"));
  EXPECT_NE(why.find("model.attention.dsa: needs model.attention.mla"), std::string::npos) << why;
  why = refusal(yaml(mla + ", dsa: {index_heads: 2, index_head_dim: 8, topk: 8}"));
  EXPECT_NE(why.find("model.attention.dsa.index_head_dim"), std::string::npos) << why;
  why = refusal(yaml(mla + ", dsa: {index_heads: 2, index_head_dim: 16}"));
  EXPECT_NE(why.find("model.attention.dsa.topk"), std::string::npos) << why;
  why = refusal(yaml(mla + ", dsa: {index_heads: 2, index_head_dim: 16, topk: 8, loss: kl}"));
  EXPECT_NE(why.find("model.attention.dsa.loss"), std::string::npos) << why;
  // A transport that does not carry DSA is refused before any rank starts, naming the key.
  const MaskSpec causal = MaskSpec::parse("causal");
  EXPECT_EQ(dsa_unsupported_reason(s.model.attention, "allgather", causal, false), "");
  EXPECT_EQ(dsa_unsupported_reason(s.model.attention, "ring", causal, false), "");
  EXPECT_EQ(dsa_unsupported_reason(s.model.attention, "a2a", causal, false), "");  // the heads split (dsa_heads.hpp)
  EXPECT_EQ(dsa_unsupported_reason(s.model.attention, "hybrid", causal, false), "");
  for (const char* t : {"ring_window"}) {
    why = dsa_unsupported_reason(s.model.attention, t, causal, false);
    EXPECT_NE(why.find("model.attention.dsa"), std::string::npos) << t << ": " << why;
  }
  {  // GLM-5's shared indexer layers: on every DSA transport (scenarios/dsa_shared*.yaml).
    AttentionConfig shared = s.model.attention;
    shared.dsa.indexer_kinds = {DsaIndexerKind::full, DsaIndexerKind::shared};
    for (const char* t : {"allgather", "ring", "a2a", "hybrid"}) EXPECT_EQ(dsa_unsupported_reason(shared, t, causal, false), "") << t;
  }
  EXPECT_NE(dsa_unsupported_reason(s.model.attention, "allgather", causal, true), "");
  EXPECT_NE(dsa_unsupported_reason(s.model.attention, "allgather", MaskSpec::parse("full"), false), "");
}

TEST(DsaModels, DeepSeekV32AndGlm5ConfigsAreReadWithTheirIndexers) {
  const HfModel v = shipped_model("deepseek-v3.2");
  EXPECT_EQ(v.model_type, "deepseek_v32");
  EXPECT_EQ(v.mixers, std::string(61, 'A'));
  EXPECT_EQ(v.attention.mla, (MlaDims{512, 64, 128, 128}));
  EXPECT_EQ(v.attention.dsa.index_heads, 64);
  EXPECT_EQ(v.attention.dsa.index_head_dim, 128);
  EXPECT_EQ(v.attention.dsa.topk, 2048);
  EXPECT_TRUE(v.attention.dsa.scoring_relu);
  const HfModel g = shipped_model("glm-5");
  EXPECT_EQ(g.model_type, "glm_moe_dsa");
  EXPECT_EQ(g.mixers, std::string(78, 'A'));
  EXPECT_EQ(g.heads, 64);
  EXPECT_EQ(g.hidden, 6144);
  EXPECT_EQ(g.q_lora_rank, 2048);
  EXPECT_EQ(g.attention.mla, (MlaDims{512, 64, 192, 256}));
  EXPECT_EQ(g.attention.dsa.index_heads, 32);
  EXPECT_EQ(g.attention.dsa.index_head_dim, 128);
  EXPECT_EQ(g.attention.dsa.topk, 2048);
  // GLM-5's wire: 512 + 64 + 128 values per token, as DeepSeek-V3.2's.
  dsa_costs::DsaDims d;
  d.mla = g.attention.mla;
  d.index_head_dim = g.attention.dsa.index_head_dim;
  EXPECT_EQ(dsa_costs::wire_elements_per_token(d), 704);
  // Defaults when the fields are absent (transformers' config classes), and the refusals.
  nlohmann::json j = nlohmann::json::parse(find_shipped_model("glm-5")->text);
  j.erase("index_n_heads");
  EXPECT_EQ(parse_hf_config(j.dump(), "x.json", "x").attention.dsa.index_heads, 32);
  const auto error_of = [](const nlohmann::json& c) {
    try {
      (void)parse_hf_config(c.dump(), "models/x.json", "x");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  j["index_topk_pattern"] = "FSSF";  // GLM-5's shared layers: a pattern per layer (DsaShared below)
  EXPECT_NE(error_of(j).find("index_topk_pattern: 4 entries for num_hidden_layers 78"), std::string::npos) << error_of(j);
  j.erase("index_topk_pattern");
  j["index_head_dim"] = 64;
  EXPECT_NE(error_of(j).find("index_head_dim: must exceed qk_rope_head_dim 64"), std::string::npos) << error_of(j);
}

TEST(DsaModels, AScenarioShrinksTheShippedModelAndKeepsItsIndexer) {
  const ScenarioSpec s = parse_scenario(R"(
model:
  config: deepseek-v3.2
  layers: 2
  hidden: 64
  heads: 4
  vocab: 128
  ffn: 64
  attention:
    mla: {kv_lora_rank: 16, qk_rope_head_dim: 8, qk_nope_head_dim: 12, v_head_dim: 10}
    dsa: {index_heads: 2, index_head_dim: 16, topk: 16}
batch: {batch_size: 1, seq_len: 64}
sweep: {sharder: load_balanced, transport: allgather, cp: 2}
)",
                                        "x.yaml");
  EXPECT_EQ(s.model.attention.dsa.index_heads, 2);
  EXPECT_EQ(s.model.attention.dsa.topk, 16);
  EXPECT_EQ(s.model.attention.dsa.loss, DsaLoss::dense);
}


// One rank, the whole model: scenarios/dsa.yaml's MLA model with `layers` layers and the dsa keys given,
// run forward on random embeddings; the DSA step context it ran with (its picks, its indexer loss).
struct OneRankRun {
  TinyTransformer model{nullptr};
  std::shared_ptr<DsaStepContext> ctx;
  at::Tensor x;  // the embeddings (requires grad)
  ModelOutput out;
};
OneRankRun run_one_rank(int64_t layers, const std::string& dsa_keys, int64_t S = 48) {
  const std::string yaml = "model: {preset: tiny, layers: " + std::to_string(layers) +
                           ", heads: 4, hidden: 64, attention: {mla: {kv_lora_rank: 16, qk_rope_head_dim: 8, "
                           "qk_nope_head_dim: 12, v_head_dim: 10}, dsa: {index_heads: 2, index_head_dim: 16, topk: 8" +
                           dsa_keys + "}}}\nbatch: {batch_size: 1, seq_len: " + std::to_string(S) +
                           "}\nsweep: {sharder: load_balanced, transport: allgather, cp: 2}\n";
  const ModelConfig config = parse_scenario(yaml, "x.yaml").model;
  OneRankRun r;
  r.model = TinyTransformer(config, at::kDouble, at::kCPU);
  TokenMeta meta;
  meta.pos = at::arange(S, at::kLong).view({1, S});
  meta.segment = at::zeros({1, S}, at::kLong);
  meta.doc = at::zeros({1, S}, at::kLong);
  meta.valid = at::ones({1, S}, at::kBool);
  r.ctx = make_dsa_single_rank_context(config.attention, meta, MaskSpec::parse("causal"), at::kDouble);
  const MixerContexts contexts{{kDefaultMixer, r.ctx}};
  at::manual_seed(11);
  r.x = at::randn({1, S, config.hidden}, at::kDouble).requires_grad_(true);
  const AttentionFn none;  // DSA layers attend through their indexer, not the hook
  r.out = r.model->forward(std::nullopt, r.x, meta.pos, none, contexts);
  return r;
}

// The sparse stage detaches the indexer's inputs: its KL trains the indexer only. d L_I / d x (the
// embeddings) and d L_I / d every non-indexer parameter are exactly 0, while the indexer's weights get a
// gradient; the dense (warm-up) stage's KL does reach x (so the test can tell the two apart).
TEST(DsaIndexerLoss, SparseStageKlTrainsTheIndexerOnlyDenseStageReachesTheModel) {
  for (const char* stage : {"sparse", "dense"}) {
    OneRankRun r = run_one_rank(2, std::string(", loss: ") + stage);
    const at::Tensor aux = r.ctx->aux_loss();
    ASSERT_TRUE(aux.defined());
    std::vector<at::Tensor> inputs{r.x};
    std::vector<std::string> names{"x"};
    for (const auto& p : r.model->named_parameters()) inputs.push_back(p.value()), names.push_back(p.key());
    const auto grads = torch::autograd::grad({aux}, inputs, {}, /*retain_graph=*/false, /*create_graph=*/false,
                                             /*allow_unused=*/true);
    double indexer = 0, model = 0;
    std::string model_names;
    for (size_t i = 0; i < grads.size(); ++i) {
      const double g = grads[i].defined() ? grads[i].abs().max().item<double>() : 0.0;
      if (names[i].find("idx_") != std::string::npos) {
        indexer = std::max(indexer, g);
      } else {
        model = std::max(model, g);
        if (g > 0) model_names += " " + names[i];
      }
    }
    EXPECT_GT(indexer, 0) << stage << ": the indexer's KL gives its own weights no gradient";
    if (std::string(stage) == "sparse")
      EXPECT_EQ(model, 0) << "sparse stage: the indexer's KL reaches the model (inputs not detached):" << model_names;
    else
      EXPECT_GT(model, 0) << "dense stage: the indexer's KL should reach the layer input";
  }
}

// GLM-5's shared layers: full, shared, shared, full, shared. A shared layer draws no indexer weights and
// attends the picks of the LAST full layer before it, recorded for the picks check like a full layer's.
TEST(DsaShared, ASharedLayerAttendsTheLastFullLayersPicksAndHasNoIndexer) {
  OneRankRun r = run_one_rank(5, ", indexer_types: [full, shared, shared, full, shared]");
  ASSERT_EQ(r.ctx->picks.size(), 5U) << "every layer's picks, the shared layers' included";
  const auto& p = r.ctx->picks;
  EXPECT_TRUE(p[1].equal(p[0])) << "layer 1 (shared) must reuse layer 0's picks";
  EXPECT_TRUE(p[2].equal(p[0])) << "layer 2 (shared) must reuse layer 0's picks";
  EXPECT_TRUE(p[4].equal(p[3])) << "layer 4 (shared) must reuse layer 3's picks, not layer 0's";
  EXPECT_FALSE(p[3].equal(p[0])) << "the two full layers pick differently here (else the test shows nothing)";
  for (const auto& q : r.model->named_parameters()) {
    const bool shared = q.key().rfind("layer1_", 0) == 0 || q.key().rfind("layer2_", 0) == 0 || q.key().rfind("layer4_", 0) == 0;
    if (q.key().find("idx_") != std::string::npos) {
      EXPECT_FALSE(shared) << q.key() << ": a shared layer has no indexer";
    }
  }
  // The shared layers' wire: the latent only (GLM-5's dims: 576 of a full layer's 704 values per token).
  dsa_costs::DsaDims d;
  d.mla = MlaDims{512, 64, 192, 256};
  d.index_head_dim = 128;
  EXPECT_EQ(dsa_costs::wire_elements_per_token(d, true), 576);
  EXPECT_EQ(dsa_costs::forward_bytes(d, 4, 1, 10, 2, true), 3 * 10 * 576 * 2);
}

TEST(DsaShared, TheScenarioKeyAndTheGlm5ReaderAndTheirRefusals) {
  const auto yaml = [](const std::string& types, int64_t layers = 3) {
    return "model: {preset: tiny, layers: " + std::to_string(layers) +
           ", heads: 4, hidden: 32, attention: {mla: {kv_lora_rank: 16, qk_rope_head_dim: 8, qk_nope_head_dim: 12, "
           "v_head_dim: 10}, dsa: {index_heads: 2, index_head_dim: 16, topk: 8, indexer_types: " + types +
           "}}}\nbatch: {batch_size: 1, seq_len: 64}\nsweep: {sharder: load_balanced, transport: allgather, cp: 2}\n";
  };
  const ScenarioSpec s = parse_scenario(yaml("[full, shared, full]"), "x.yaml");
  EXPECT_EQ(s.model.attention.dsa.indexer_kinds,
            (std::vector<DsaIndexerKind>{DsaIndexerKind::full, DsaIndexerKind::shared, DsaIndexerKind::full}));
  EXPECT_EQ(s.model.attention.dsa.shared_layers(), 1);
  std::string why = refusal(yaml("[shared, full, full]"));
  EXPECT_NE(why.find("model.attention.dsa.indexer_types: the first attention layer is shared"), std::string::npos) << why;
  why = refusal(yaml("[full, shared]"));
  EXPECT_NE(why.find("model.attention.dsa.indexer_types: 2 types for the model's 3 attention layers"), std::string::npos)
      << why;
  why = refusal(yaml("[full, sparse, full]"));
  EXPECT_NE(why.find("unknown indexer type \"sparse\""), std::string::npos) << why;

  // GLM-5's file: every layer full (neither indexer_types nor index_topk_pattern nor index_topk_freq in it).
  EXPECT_TRUE(shipped_model("glm-5").attention.dsa.indexer_kinds.empty());
  nlohmann::json j = nlohmann::json::parse(find_shipped_model("glm-5")->text);
  j["num_hidden_layers"] = 8;
  const auto kinds = [](const nlohmann::json& c) {
    std::string out;
    for (const DsaIndexerKind k : parse_hf_config(c.dump(), "x.json", "x").attention.dsa.indexer_kinds)
      out += k == DsaIndexerKind::full ? 'F' : 'S';
    return out;
  };
  // transformers' schedule: layer i full iff max(i - offset + 1, 0) % freq == 0 (offset 2 by default).
  j["index_topk_freq"] = 3;
  EXPECT_EQ(kinds(j), "FFSSFSSF");
  j["index_skip_topk_offset"] = 1;
  EXPECT_EQ(kinds(j), "FSSFSSFS");
  j["index_topk_pattern"] = "FSFSSFFS";  // the pattern wins over the schedule
  EXPECT_EQ(kinds(j), "FSFSSFFS");
  j["indexer_types"] = {"full", "full", "shared", "full", "full", "full", "full", "shared"};  // the list wins
  EXPECT_EQ(kinds(j), "FFSFFFFS");
  const auto error_of = [](const nlohmann::json& c) {
    try {
      (void)parse_hf_config(c.dump(), "models/x.json", "x");
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  j["indexer_types"][0] = "shared";
  EXPECT_NE(error_of(j).find("indexer_types: the first layer is shared"), std::string::npos) << error_of(j);
  j.erase("indexer_types");
  j["index_topk_pattern"] = "FSF";
  EXPECT_NE(error_of(j).find("index_topk_pattern: 3 entries for num_hidden_layers 8"), std::string::npos) << error_of(j);

  // Shrunk by a scenario: both kinds kept in their share, the first layer full.
  j.erase("index_topk_pattern");
  j["num_hidden_layers"] = 78;
  j["index_topk_freq"] = 3;
  j.erase("index_skip_topk_offset");
  ModelOverrides o;
  o.layers = 4;
  std::string shrunk;
  for (const DsaIndexerKind k : with_overrides(parse_hf_config(j.dump(), "x.json", "x"), o).attention.dsa.indexer_kinds)
    shrunk += k == DsaIndexerKind::full ? 'F' : 'S';
  EXPECT_EQ(shrunk.size(), 4U);
  EXPECT_EQ(shrunk.front(), 'F') << shrunk;
  EXPECT_NE(shrunk.find('S'), std::string::npos) << shrunk;
}

}  // namespace
}  // namespace cpbench
