// workload_balanced: the chunk solver, the layout's properties (a partition with equal counts, each
// rank ascending, padding below chunk*W, deterministic), its balance under each mask (packed documents
// under the document mask: max/mean <= 1.05 where load_balanced is clearly worse), the Sharder verbs
// with it (the map arrives with the shard) and `cpbench layout`.
#include "sharders/workload_balanced.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "sharder_test_util.hpp"
#include "sharders/mask_area.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...

using namespace cpbench;
using namespace cpbench::test;

namespace {

LayoutRequest request(int64_t W, int64_t S, std::vector<int64_t> docs = {}, std::string mask = "causal",
                      int64_t chunk = 0) {
  LayoutRequest r;
  r.cp = W;
  r.seq_len = S;
  r.doc_lens = std::move(docs);
  r.mask = MaskSpec::parse(mask);
  r.chunk_size = chunk;
  return r;
}

// max/mean of each rank's visible (q, k) pairs under `mask` (sharders/mask_area.hpp).
double imbalance(const GlobalLayout& g, const std::vector<int64_t>& docs, const std::string& mask) {
  const auto m = MaskSpec::parse(mask);
  const auto a = mask_area::rank_areas(g, stream_of(g, docs), m);
  const double mean =
      static_cast<double>(std::accumulate(a.begin(), a.end(), int64_t{0})) / static_cast<double>(a.size());
  return static_cast<double>(*std::max_element(a.begin(), a.end())) / mean;
}

// A row of packed documents of mixed lengths: a few long ones, many short ones (4096 tokens).
const std::vector<int64_t> kMixedDocs = {1800, 100, 700, 300, 650, 40, 250, 60, 196};

void expect_partition(const GlobalLayout& g, const std::string& what) {
  std::vector<int> seen(static_cast<size_t>(g.padded_seq_len), 0);
  for (const auto& r : g.ranks) {
    EXPECT_EQ(static_cast<int64_t>(r.size()), g.padded_seq_len / g.cp) << what;
    EXPECT_TRUE(std::is_sorted(r.begin(), r.end())) << what << ": a rank's positions are not ascending";
    for (int64_t p : r) {
      ASSERT_GE(p, 0) << what;
      ASSERT_LT(p, g.padded_seq_len) << what;
      ++seen[static_cast<size_t>(p)];
    }
  }
  for (size_t p = 0; p < seen.size(); ++p) ASSERT_EQ(seen[p], 1) << what << ": position " << p;
}

struct CommandResult {
  int status = -1;
  std::string output;  // stdout and stderr
};

CommandResult run_cpbench(const std::string& args) {
  CommandResult res;
  const std::string cmd = std::string(CPBENCH_EXE) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return res;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) res.output.append(buf, n);
  const int st = pclose(pipe);
  res.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return res;
}

}  // namespace

TEST(WorkloadBalancedSolver, DefaultChunkRule) {
  using workload_balanced::default_chunk_size;
  EXPECT_EQ(default_chunk_size(1 << 20, 8), 512);   // capped at 512
  EXPECT_EQ(default_chunk_size(512, 4), 16);        // 512 / 32
  EXPECT_EQ(default_chunk_size(100, 2), 4);         // 6, rounded down to a power of two
  EXPECT_EQ(default_chunk_size(10, 4), 1);          // never below 1
  EXPECT_EQ(default_chunk_size(131072, 1024), 16);  // 131072 / 8192
}

TEST(WorkloadBalancedSolver, SwapsFixTheGreedyCounterExample) {
  // MagiAttention's dispatch-solver docstring: greedy gives 19 / 17, the optimum is 18 / 18.
  const std::vector<int64_t> areas = {8, 7, 6, 5, 4, 2, 2, 2};
  const auto owner = workload_balanced::assign_chunks(areas, 2);
  std::vector<int64_t> load(2, 0), count(2, 0);
  for (size_t i = 0; i < areas.size(); ++i) {
    load[static_cast<size_t>(owner[i])] += areas[i];
    ++count[static_cast<size_t>(owner[i])];
  }
  EXPECT_EQ(load, (std::vector<int64_t>{18, 18}));
  EXPECT_EQ(count, (std::vector<int64_t>{4, 4}));
}

TEST(WorkloadBalancedSolver, EqualCountsAndNoWorseThanTheAverageBound) {
  for (int64_t W : {1, 2, 3, 5, 8}) {
    std::vector<int64_t> areas;
    uint64_t x = 12345 + static_cast<uint64_t>(W);
    for (int64_t i = 0; i < W * 7; ++i) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      areas.push_back(static_cast<int64_t>((x >> 33) % 1000));
    }
    const auto owner = workload_balanced::assign_chunks(areas, W);
    std::vector<int64_t> load(static_cast<size_t>(W), 0), count(static_cast<size_t>(W), 0);
    for (size_t i = 0; i < areas.size(); ++i) {
      load[static_cast<size_t>(owner[i])] += areas[i];
      ++count[static_cast<size_t>(owner[i])];
    }
    for (int64_t c : count) EXPECT_EQ(c, 7) << "W=" << W;
    const double mean =
        static_cast<double>(std::accumulate(areas.begin(), areas.end(), int64_t{0})) / static_cast<double>(W);
    EXPECT_LE(static_cast<double>(*std::max_element(load.begin(), load.end())),
              mean + static_cast<double>(*std::max_element(areas.begin(), areas.end())))
        << "W=" << W;
    EXPECT_EQ(owner, workload_balanced::assign_chunks(areas, W)) << "deterministic";
  }
  EXPECT_THROW((void)workload_balanced::assign_chunks({1, 2, 3}, 2), Error);
}

TEST(WorkloadBalancedLayout, PartitionsThePaddedRowInAscendingChunks) {
  auto layout = make_layout("workload_balanced");
  EXPECT_TRUE(layout->data_dependent());
  EXPECT_FALSE(layout->packed());
  EXPECT_EQ(attention_routing("workload_balanced"), AttentionRouting::transport);
  for (int64_t W = 1; W <= 8; ++W)
    for (int64_t S : {1, 7, 16, 31, 64, 100, 257, 1000})
      for (int64_t chunk : {0, 1, 4, 16}) {
        for (const std::string mask : {"causal", "document", "full", "sliding_window:5"}) {
          const std::string what = cpbench::detail::concat("W=", W, " S=", S, " chunk=", chunk, " mask=", mask);
          const GlobalLayout g = layout->compute(request(W, S, {}, mask, chunk));
          const int64_t c = chunk > 0 ? chunk : workload_balanced::default_chunk_size(S, W);
          EXPECT_EQ(g.layout, "workload_balanced") << what;
          EXPECT_EQ(g.original_seq_len, S) << what;
          EXPECT_EQ(g.padded_seq_len % (c * W), 0) << what;
          EXPECT_GE(g.padded_seq_len, S) << what;
          EXPECT_LT(g.padded_seq_len - S, c * W) << what;
          EXPECT_TRUE(g.cu_seqlens.empty() && g.cu_seqlens_padded.empty()) << what;
          expect_partition(g, what);
          // Whole chunks: every run of c positions belongs to one rank.
          const auto own = g.owners();
          for (int64_t p = 0; p < g.padded_seq_len; ++p)
            ASSERT_EQ(own[static_cast<size_t>(p)], own[static_cast<size_t>(p / c * c)]) << what;
          EXPECT_EQ(g.ranks, layout->compute(request(W, S, {}, mask, chunk)).ranks) << what << ": not deterministic";
        }
      }
}

TEST(WorkloadBalancedLayout, BalancesOneCausalSequenceLikeHeadTail) {
  for (int64_t W : {2, 4, 8}) {
    const GlobalLayout g = make_layout("workload_balanced")->compute(request(W, 4096, {}, "causal", 32));
    EXPECT_LE(imbalance(g, {}, "causal"), 1.01) << "W=" << W;
  }
  // Full attention: every chunk has the same area, so the balance is exact.
  const GlobalLayout full = make_layout("workload_balanced")->compute(request(4, 1000, {}, "full", 10));
  EXPECT_DOUBLE_EQ(imbalance(full, {}, "full"), 1.0);
}

TEST(WorkloadBalancedLayout, PackedDocumentsUnderTheDocumentMaskBeatLoadBalanced) {
  const int64_t S = std::accumulate(kMixedDocs.begin(), kMixedDocs.end(), int64_t{0});
  ASSERT_EQ(S, 4096);
  for (int64_t W : {2, 4, 8}) {
    const GlobalLayout wb = make_layout("workload_balanced")->compute(request(W, S, kMixedDocs, "document", 16));
    const GlobalLayout lb = make_layout("load_balanced")->compute(request(W, S));
    const double wb_imb = imbalance(wb, kMixedDocs, "document"), lb_imb = imbalance(lb, kMixedDocs, "document");
    EXPECT_LE(wb_imb, 1.05) << "W=" << W;
    EXPECT_GE(lb_imb, 1.15) << "W=" << W << ": load_balanced should be clearly worse on this mix";
    EXPECT_LT(wb_imb, lb_imb) << "W=" << W;
  }
  // With the default chunk rule (the runner passes chunk_size 0) the balance still holds at W = 2, 4.
  for (int64_t W : {2, 4}) {
    const GlobalLayout wb = make_layout("workload_balanced")->compute(request(W, S, kMixedDocs, "document"));
    EXPECT_LE(imbalance(wb, kMixedDocs, "document"), 1.05) << "W=" << W;
  }
}

TEST(WorkloadBalancedLayout, SlidingWindowAndRowPaddingBalance) {
  const GlobalLayout g = make_layout("workload_balanced")->compute(request(4, 3000, {}, "sliding_window:256", 16));
  EXPECT_LE(imbalance(g, {}, "sliding_window:256"), 1.02);
  // Documents that leave row padding behind them: the padding's queries see no document.
  const std::vector<int64_t> docs = {900, 30, 500, 70};
  const GlobalLayout d = make_layout("workload_balanced")->compute(request(4, 2048, docs, "document", 8));
  EXPECT_LE(imbalance(d, docs, "document"), 1.05);
}

TEST(WorkloadBalancedLayout, BadRequestsNameTheField) {
  auto layout = make_layout("workload_balanced");
  EXPECT_TRUE(contains_all(error_of([&] { (void)layout->compute(request(0, 8)); }),
                           {"workload_balanced", "cp must be a positive integer, got 0"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)layout->compute(request(2, 0)); }),
                           {"workload_balanced", "seq_len must be a positive integer, got 0"}));
  EXPECT_TRUE(contains_all(error_of([&] {
                             (void)layout->compute(request(2, 10, {6, 6}));
                           }),
                           {"doc_lens sum to 12", "seq_len 10"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)layout->compute(request(2, 10, {6, 0})); }), {"doc_lens[1]", "got 0"}));
  EXPECT_TRUE(contains_all(error_of<UsageError>([&] { (void)layout->compute(request(2, 10, {}, "banded")); }),
                           {"unknown attention mask 'banded'", "causal, full, document, sliding_window:N"}));
  EXPECT_TRUE(contains_all(error_of<UsageError>([&] { (void)layout->compute(request(2, 10, {}, "sliding_window:0")); }),
                           {"sliding_window", "window"}));
  EXPECT_TRUE(contains_all(error_of([&] { (void)layout->compute(request(2, 10, {}, "causal", -1)); }),
                           {"chunk_size", "got -1"}));
}

// ---------------------------------------------------------------------------------------------------
// Through the Sharder verbs: the map arrives with the shard.
// ---------------------------------------------------------------------------------------------------
namespace {

Batch row_with_documents(int64_t S, const std::vector<int64_t>& docs) {
  BatchSpec sp;
  sp.B = 1;
  sp.S = S;
  sp.seq_first_extra = false;
  Batch in = make_batch(sp);
  if (!docs.empty()) {
    in.seq_lens = at::tensor(at::ArrayRef<int64_t>(docs), at::kLong).view({1, static_cast<int64_t>(docs.size())});
  }
  return in;
}

std::vector<Sharder> wb_sharders(int64_t W, const std::string& mask, int64_t chunk) {
  auto layout = make_layout("workload_balanced");
  std::vector<Sharder> out;
  for (int64_t r = 0; r < W; ++r) {
    SharderOptions o;
    o.cp_size = W;
    o.cp_rank = r;
    o.padding_token_id = kPadId;
    o.mask = MaskSpec::parse(mask);
    o.chunk_size = chunk;
    out.emplace_back(layout, o);
  }
  return out;
}

void check_round_trip(int64_t W, int64_t S, const std::vector<int64_t>& docs, const std::string& mask, int64_t chunk) {
  SCOPED_TRACE(cpbench::detail::concat("W=", W, " S=", S, " docs=", shape_str(docs), " mask=", mask, " chunk=", chunk));
  const Batch in = row_with_documents(S, docs);
  auto sh = wb_sharders(W, mask, chunk);
  std::vector<Batch> locals;
  for (auto& s : sh) locals.push_back(s.shard(in));
  // The map is the layout's for the row's documents and the sharder's mask and chunk.
  const GlobalLayout g = make_layout("workload_balanced")->compute(request(W, S, docs, mask, chunk));
  const int64_t P = g.padded_seq_len;
  for (int64_t r = 0; r < W; ++r) {
    const auto& s = sh[static_cast<size_t>(r)];
    ASSERT_EQ(s.shard_layout().padded_seq_len, P);
    ASSERT_EQ(s.shard_layout().original_seq_len, S);
    EXPECT_EQ(to_vec(s.local_token_global_indices(P)), g.ranks[static_cast<size_t>(r)]);
    EXPECT_EQ(to_vec(s.local_token_global_indices(P, (r + 1) % W)), g.ranks[static_cast<size_t>((r + 1) % W)]);
  }
  for (const Key& key : keys_of(in)) {
    SCOPED_TRACE(key.name);
    std::vector<at::Tensor> parts;
    for (const auto& l : locals) parts.push_back(*key.get(l));
    const at::Tensor input = *key.get(in);
    const at::Tensor padded = expected_padded(input, key.seq_dim, P, key.fill);
    for (int64_t r = 0; r < W; ++r)
      EXPECT_TRUE(same(parts[static_cast<size_t>(r)],
                       padded.index_select(key.seq_dim, idx_tensor(g.ranks[static_cast<size_t>(r)]))))
          << "rank " << r;
    EXPECT_TRUE(same(sh[0].gather_token_tensor(parts, key.seq_dim, false), padded));
    EXPECT_TRUE(same(sh[static_cast<size_t>(W - 1)].gather_token_tensor(parts, key.seq_dim, true), input));
    EXPECT_TRUE(same(sh[0].restore_gathered(at::cat(parts, key.seq_dim), key.seq_dim, true), input));
  }
  // shard_token_tensor repeats the batch's transform.
  for (int64_t r = 0; r < W; ++r)
    EXPECT_TRUE(same(sh[static_cast<size_t>(r)].shard_token_tensor(*in.labels, 1, kIgnoreIndex),
                     *locals[static_cast<size_t>(r)].labels));
}

}  // namespace

TEST(WorkloadBalancedSharder, ShardGatherRoundTripsWithDocuments) {
  for (int64_t W = 1; W <= 4; ++W) {
    check_round_trip(W, 37, {10, 3, 17, 5}, "document", 2);
    check_round_trip(W, 37, {10, 3, 17, 5}, "causal", 0);
    check_round_trip(W, 64, {}, "causal", 4);
    check_round_trip(W, 50, {50}, "sliding_window:6", 3);
  }
}

TEST(WorkloadBalancedSharder, GatherGradientsReachTheOwners) {
  const Batch in = row_with_documents(23, {9, 4, 10});
  auto sh = wb_sharders(3, "document", 2);
  std::vector<Batch> locals;
  for (auto& s : sh) locals.push_back(s.shard(in));
  std::vector<at::Tensor> parts;
  for (auto& l : locals) parts.push_back(l.extras.at("teacher_logits").tensor.to(at::kDouble).requires_grad_(true));
  at::Tensor full = sh[0].gather_token_tensor(parts, 1, true, 0.0);
  at::Tensor w = at::arange(full.numel(), at::kDouble).view(full.sizes()) + 1.0;
  (full * w).sum().backward();
  for (int64_t r = 0; r < 3; ++r)
    EXPECT_TRUE(same(parts[static_cast<size_t>(r)].grad(), sh[static_cast<size_t>(r)].shard_token_tensor(w, 1, 0.0)))
        << "rank " << r;
}

TEST(WorkloadBalancedSharder, MapIsUnavailableBeforeTheFirstShard) {
  auto sh = wb_sharders(2, "causal", 0);
  EXPECT_TRUE(contains_all(error_of([&] { (void)sh[0].local_token_global_indices(64); }),
                           {"workload_balanced", "data-dependent", "shard"}));
  // Rows without seq_lens (B > 1) are one document each; the sharder still works.
  BatchSpec sp;
  sp.B = 2;
  sp.S = 20;
  sp.seq_first_extra = false;
  const Batch in = make_batch(sp);
  std::vector<at::Tensor> parts;
  for (auto& s : sh) parts.push_back(*s.shard(in).input_ids);
  EXPECT_TRUE(same(sh[1].gather_token_tensor(parts, 1, true), *in.input_ids));
}

TEST(WorkloadBalancedCommand, LayoutCommandShowsTheMap) {
  const CommandResult table = run_cpbench("layout --sharder workload_balanced --cp 4 --seq-len 64");
  EXPECT_EQ(table.status, 0) << table.output;
  EXPECT_TRUE(contains_all(table.output, {"sharder workload_balanced, cp 4, seq_len 64", "16 tokens per rank"}));

  const CommandResult js = run_cpbench(
      "layout --sharder workload_balanced --cp 2 --seq-len 40 --doc-lens 20,10,5 --mask document --chunk-size 4 "
      "--format json");
  ASSERT_EQ(js.status, 0) << js.output;
  const auto j = nlohmann::json::parse(js.output);
  const GlobalLayout g = make_layout("workload_balanced")->compute(request(2, 40, {20, 10, 5}, "document", 4));
  EXPECT_EQ(j["ranks"].get<std::vector<std::vector<int64_t>>>(), g.ranks);
  EXPECT_EQ(j["padded_seq_len"].get<int64_t>(), 40);

  const CommandResult bad = run_cpbench("layout --sharder workload_balanced --cp 2 --seq-len 40 --mask banded");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_TRUE(contains_all(bad.output, {"unknown attention mask 'banded'"}));
}
