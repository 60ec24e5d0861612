// Properties every layout must have, over W = 1..8 and many lengths (divisible or not, S < 2W, S = 1):
// the ranks partition [0, P) with equal counts, P is the right multiple and P - S < multiple, and the
// map equals an independent re-derivation of the DESIGN.md table (not the code under test).
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "sharders/core/check.hpp"
#include "sharders/registry.hpp"

using namespace cpbench;
using Ranks = std::vector<std::vector<int64_t>>;

namespace {

const std::vector<int64_t> kLengths = {1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 64, 100, 257};

LayoutRequest unpacked_request(int64_t cp, int64_t S) {
  LayoutRequest r;
  r.cp = cp;
  r.seq_len = S;
  return r;
}

LayoutRequest packed_request(int64_t cp, std::vector<int64_t> docs) {
  LayoutRequest r;
  r.cp = cp;
  r.doc_lens = std::move(docs);
  return r;
}

// Independent derivations, straight from the DESIGN.md table. owner_and_slot(p) -> (rank, local index).
Ranks expected_contiguous(int64_t W, int64_t P) {
  Ranks out(static_cast<size_t>(W));
  const int64_t L = P / W;
  for (int64_t p = 0; p < P; ++p) out[static_cast<size_t>(p / L)].push_back(p);
  return out;
}

Ranks expected_striped(int64_t W, int64_t P) {
  Ranks out(static_cast<size_t>(W));
  for (int64_t p = 0; p < P; ++p) out[static_cast<size_t>(p % W)].push_back(p);
  return out;
}

// Head-tail over [start, start + n): chunk k of size n/2W belongs to rank k (k < W) or 2W-1-k; a rank
// lists its head chunk then its tail chunk.
void append_head_tail(Ranks& out, int64_t W, int64_t start, int64_t n) {
  const int64_t c = n / (2 * W);
  Ranks heads(static_cast<size_t>(W)), tails(static_cast<size_t>(W));
  for (int64_t k = 0; k < n; ++k) {
    const int64_t chunk = k / c;
    if (chunk < W)
      heads[static_cast<size_t>(chunk)].push_back(start + k);
    else
      tails[static_cast<size_t>(2 * W - 1 - chunk)].push_back(start + k);
  }
  for (size_t r = 0; r < out.size(); ++r) {
    out[r].insert(out[r].end(), heads[r].begin(), heads[r].end());
    out[r].insert(out[r].end(), tails[r].begin(), tails[r].end());
  }
}

Ranks expected_head_tail(int64_t W, int64_t P) {
  Ranks out(static_cast<size_t>(W));
  append_head_tail(out, W, 0, P);
  return out;
}

// Every position in [0, P) exactly once across the ranks; equal counts P / W.
void expect_partition(const GlobalLayout& g, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(g.ranks.size()), g.cp) << what;
  ASSERT_EQ(g.padded_seq_len % g.cp, 0) << what;
  std::vector<int> seen(static_cast<size_t>(g.padded_seq_len), 0);
  for (size_t r = 0; r < g.ranks.size(); ++r) {
    EXPECT_EQ(static_cast<int64_t>(g.ranks[r].size()), g.local_len()) << what << " rank " << r;
    for (int64_t p : g.ranks[r]) {
      ASSERT_GE(p, 0) << what << " rank " << r;
      ASSERT_LT(p, g.padded_seq_len) << what << " rank " << r;
      ++seen[static_cast<size_t>(p)];
    }
  }
  for (size_t p = 0; p < seen.size(); ++p) ASSERT_EQ(seen[p], 1) << what << ": position " << p;
  // inverse() and owners() agree with the rank lists.
  const auto inv = g.inverse();
  const auto own = g.owners();
  int64_t j = 0;
  for (size_t r = 0; r < g.ranks.size(); ++r)
    for (int64_t p : g.ranks[r]) {
      EXPECT_EQ(inv[static_cast<size_t>(p)], j++) << what;
      EXPECT_EQ(own[static_cast<size_t>(p)], static_cast<int64_t>(r)) << what;
    }
}

struct Unpacked {
  std::string name;       // as asked of the registry (aliases included)
  std::string canonical;  // GlobalLayout::layout
  int64_t multiple_per_w;
  Ranks (*expected)(int64_t, int64_t);
};

const std::vector<Unpacked>& unpacked_layouts() {
  static const std::vector<Unpacked> all = {
      {"contiguous", "contiguous", 1, expected_contiguous},
      {"load_balanced", "load_balanced", 2, expected_head_tail},
      {"round_robin", "load_balanced", 2, expected_head_tail},
      {"head_tail", "load_balanced", 2, expected_head_tail},
      {"zigzag", "load_balanced", 2, expected_head_tail},
      {"striped", "striped", 1, expected_striped},
      {"sdpa_wrap", "sdpa_wrap", 2, expected_head_tail},
  };
  return all;
}

}  // namespace

TEST(LayoutProperties, UnpackedLayoutsPartitionThePaddedStream) {
  for (const auto& u : unpacked_layouts()) {
    auto layout = make_layout(u.name);
    for (int64_t W = 1; W <= 8; ++W) {
      const int64_t m = u.multiple_per_w * W;
      EXPECT_EQ(layout->pad_multiple(W), m) << u.name;
      for (int64_t S : kLengths) {
        const std::string what = u.name + " W=" + std::to_string(W) + " S=" + std::to_string(S);
        const GlobalLayout g = layout->compute(unpacked_request(W, S));
        EXPECT_EQ(g.layout, u.canonical) << what;
        EXPECT_EQ(g.cp, W) << what;
        EXPECT_EQ(g.original_seq_len, S) << what;
        EXPECT_EQ(g.padded_seq_len % m, 0) << what;
        EXPECT_GE(g.padded_seq_len, S) << what;
        EXPECT_LT(g.padded_seq_len - S, m) << what;
        EXPECT_TRUE(g.cu_seqlens.empty() && g.cu_seqlens_padded.empty()) << what;
        expect_partition(g, what);
        EXPECT_EQ(g.ranks, u.expected(W, g.padded_seq_len)) << what;
      }
    }
  }
}

TEST(LayoutProperties, ClosedFormHelpersMatchTheLayouts) {
  for (int64_t W = 1; W <= 8; ++W)
    for (int64_t k = 1; k <= 5; ++k) {
      const int64_t P = 2 * W * k;
      for (int64_t r = 0; r < W; ++r) {
        EXPECT_EQ(layout_math::contiguous(W, P, r), expected_contiguous(W, P)[static_cast<size_t>(r)]);
        EXPECT_EQ(layout_math::striped(W, P, r), expected_striped(W, P)[static_cast<size_t>(r)]);
        EXPECT_EQ(layout_math::head_tail(W, P, r), expected_head_tail(W, P)[static_cast<size_t>(r)]);
        EXPECT_EQ(layout_math::thd(W, {0, P}, r), expected_head_tail(W, P)[static_cast<size_t>(r)]);
      }
    }
  EXPECT_EQ(layout_math::round_up(1, 4), 4);
  EXPECT_EQ(layout_math::round_up(4, 4), 4);
  EXPECT_EQ(layout_math::round_up(5, 4), 8);
  EXPECT_EQ(layout_math::round_up(257, 16), 272);
}

TEST(LayoutProperties, ThdPadsEachDocumentAndSplitsItHeadTail) {
  const std::vector<std::vector<int64_t>> mixes = {
      {1}, {1, 1, 1}, {3, 5, 7}, {16}, {8, 8}, {1, 17, 64}, {100, 1, 31}, {257}, {2, 3, 5, 7, 11, 13}};
  auto layout = make_layout("thd");
  EXPECT_TRUE(layout->packed());
  EXPECT_TRUE(layout->data_dependent());
  for (int64_t W = 1; W <= 8; ++W) {
    const int64_t m = 2 * W;
    EXPECT_EQ(layout->pad_multiple(W), m);
    for (const auto& docs : mixes) {
      const std::string what = "thd W=" + std::to_string(W) + " docs=" + shape_str(docs);
      const GlobalLayout g = layout->compute(packed_request(W, docs));
      EXPECT_EQ(g.layout, "thd") << what;
      EXPECT_EQ(g.original_seq_len, -1) << what;
      ASSERT_EQ(g.cu_seqlens.size(), docs.size() + 1) << what;
      ASSERT_EQ(g.cu_seqlens_padded.size(), docs.size() + 1) << what;
      EXPECT_EQ(g.cu_seqlens.front(), 0) << what;
      EXPECT_EQ(g.cu_seqlens_padded.front(), 0) << what;
      Ranks expected(static_cast<size_t>(W));
      for (size_t d = 0; d < docs.size(); ++d) {
        EXPECT_EQ(g.cu_seqlens[d + 1] - g.cu_seqlens[d], docs[d]) << what << " doc " << d;
        const int64_t n = g.cu_seqlens_padded[d + 1] - g.cu_seqlens_padded[d];
        EXPECT_EQ(n % m, 0) << what << " doc " << d;
        EXPECT_GE(n, docs[d]) << what << " doc " << d;
        EXPECT_LT(n - docs[d], m) << what << " doc " << d;
        append_head_tail(expected, W, g.cu_seqlens_padded[d], n);
      }
      EXPECT_EQ(g.padded_seq_len, g.cu_seqlens_padded.back()) << what;
      expect_partition(g, what);
      EXPECT_EQ(g.ranks, expected) << what;
      // Every rank holds exactly 1/W of every document (per-document balance).
      for (size_t r = 0; r < g.ranks.size(); ++r)
        for (size_t d = 0; d < docs.size(); ++d) {
          const int64_t lo = g.cu_seqlens_padded[d], hi = g.cu_seqlens_padded[d + 1];
          int64_t mine = 0;
          for (int64_t p : g.ranks[r]) mine += p >= lo && p < hi;
          EXPECT_EQ(mine, (hi - lo) / W) << what << " rank " << r << " doc " << d;
        }
    }
  }
}

TEST(LayoutProperties, ThdWithOnlySeqLenIsOneDocumentAndEqualsLoadBalanced) {
  for (int64_t W = 1; W <= 8; ++W)
    for (int64_t S : kLengths) {
      const GlobalLayout thd = make_layout("thd")->compute(unpacked_request(W, S));
      const GlobalLayout lb = make_layout("load_balanced")->compute(unpacked_request(W, S));
      EXPECT_EQ(thd.ranks, lb.ranks) << "W=" << W << " S=" << S;
      EXPECT_EQ(thd.cu_seqlens, (std::vector<int64_t>{0, S}));
      EXPECT_EQ(thd.cu_seqlens_padded, (std::vector<int64_t>{0, lb.padded_seq_len}));
    }
}

TEST(LayoutProperties, RequestValidationNamesTheField) {
  for (const auto& name : known_layouts()) {
    auto layout = make_layout(name);
    try {
      (void)layout->compute(unpacked_request(0, 8));
      ADD_FAILURE() << name << ": cp=0 accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cp must be a positive integer, got 0"), std::string::npos)
          << name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
    if (layout->packed()) continue;
    try {
      (void)layout->compute(unpacked_request(2, 0));
      ADD_FAILURE() << name << ": seq_len=0 accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("seq_len must be a positive integer, got 0"), std::string::npos)
          << name << ": " << e.what();
    }
  }
  try {
    (void)make_layout("thd")->compute(packed_request(2, {4, 0, 3}));
    ADD_FAILURE() << "thd: empty document accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("doc_lens[1] must be a positive length, got 0"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW((void)make_layout("thd")->compute(packed_request(2, {})), Error);
}

TEST(LayoutProperties, RegistryFlagsAndAliases) {
  EXPECT_EQ(known_layouts(),
            (std::vector<std::string>{"contiguous", "load_balanced", "striped", "thd", "sdpa_wrap", "workload_balanced"}));
  for (const char* alias : {"round_robin", "head_tail", "zigzag"}) EXPECT_EQ(make_layout(alias)->name(), "load_balanced");
  for (const auto& name : known_layouts()) {
    auto layout = make_layout(name);
    EXPECT_EQ(layout->name(), name);
    EXPECT_FALSE(layout->summary().empty()) << name;
    EXPECT_EQ(layout->packed(), name == "thd") << name;
    EXPECT_EQ(layout->data_dependent(), name == "thd" || name == "workload_balanced") << name;
  }
  EXPECT_EQ(attention_routing("sdpa_wrap"), AttentionRouting::sdpa_hook);
  EXPECT_EQ(attention_routing("load_balanced"), AttentionRouting::transport);
  EXPECT_EQ(attention_routing("round_robin"), AttentionRouting::transport);
  EXPECT_EQ(attention_routing("thd"), AttentionRouting::transport);
  // The negative controls are not layouts (kernels/controls/): they shard with one.
  for (const char* control : {"local_only", "perturbed", "grad_dropped", "ssm_rank_order"})
    EXPECT_THROW((void)make_layout(control), UsageError) << control;
}
