// workload_balanced (MagiAttention-style dispatch): chunks of the row assigned to ranks so that every
// rank does about the same attention work under the actual mask, with equal token counts (the
// non-attention layers stay balanced too). See sharders/workload_balanced.hpp for the contract.
#include "sharders/workload_balanced.hpp"

#include <algorithm>
#include <numeric>
#include <queue>
#include <set>

#include "sharders/core/check.hpp"
#include "sharders/layout.hpp"
#include "sharders/mask_area.hpp"
#include "sharders/stream.hpp"

namespace cpbench {

namespace workload_balanced {

int64_t default_chunk_size(int64_t seq_len, int64_t cp) {
  const int64_t target = std::min(kMaxDefaultChunk, std::max<int64_t>(1, seq_len / (8 * std::max<int64_t>(cp, 1))));
  int64_t c = 1;
  while (c * 2 <= target) c *= 2;
  return c;
}

namespace {

// Greedy longest-processing-time with a cardinality cap: heaviest chunk first, onto the least loaded
// rank that still has room (MagiAttention's MinHeapDispatchAlg).
std::vector<int64_t> greedy(const std::vector<int64_t>& areas, int64_t cp, int64_t per_rank,
                            const std::vector<int64_t>& base) {
  const size_t n = areas.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return areas[a] > areas[b]; });
  using Slot = std::pair<int64_t, int64_t>;  // (load, rank): ties go to the lower rank
  std::priority_queue<Slot, std::vector<Slot>, std::greater<>> open;
  for (int64_t r = 0; r < cp; ++r) open.push({base.empty() ? 0 : base[static_cast<size_t>(r)], r});
  std::vector<int64_t> count(static_cast<size_t>(cp), 0), owner(n, -1);
  for (size_t i : order) {
    auto [load, r] = open.top();
    open.pop();
    owner[i] = r;
    if (++count[static_cast<size_t>(r)] < per_rank) open.push({load + areas[i], r});
  }
  return owner;
}

// Pairwise swaps: move work off the most loaded rank M by exchanging one of its chunks a with a
// lighter chunk b of another rank R. The best swap minimizes max(L_M - d, L_R + d), d = area a -
// area b; it is taken only if that is below L_M, so the sorted load vector strictly decreases and
// the loop ends. Each rank's chunk areas are kept sorted for the binary search on b.
void improve_by_swaps(const std::vector<int64_t>& areas, int64_t cp, const std::vector<int64_t>& base,
                      std::vector<int64_t>& owner) {
  const size_t W = static_cast<size_t>(cp);
  std::vector<int64_t> load = base.empty() ? std::vector<int64_t>(W, 0) : base;
  // members[r]: (area, chunk) pairs sorted ascending.
  std::vector<std::vector<std::pair<int64_t, size_t>>> members(W);
  for (size_t i = 0; i < areas.size(); ++i) {
    load[static_cast<size_t>(owner[i])] += areas[i];
    members[static_cast<size_t>(owner[i])].push_back({areas[i], i});
  }
  for (auto& m : members) std::sort(m.begin(), m.end());
  // Ranks ordered by (load, rank): the heaviest is the last, partners are tried lightest first.
  std::set<std::pair<int64_t, size_t>> by_load;
  for (size_t r = 0; r < W; ++r) by_load.insert({load[r], r});
  const size_t max_swaps = 2 * areas.size() + 64;
  for (size_t iter = 0; iter < max_swaps; ++iter) {
    // The heaviest rank, the lowest index among equals (deterministic).
    const int64_t top = by_load.rbegin()->first;
    const size_t M = by_load.lower_bound({top, 0})->second;
    int64_t best_max = load[M];
    size_t best_R = W, best_a = 0, best_b = 0;
    for (const auto& [load_R, R] : by_load) {
      // A swap with R leaves at least (L_M + L_R) / 2 on one of the two, so once that reaches the best
      // found, heavier partners cannot do better.
      if (load_R >= load[M] || (load[M] + load_R + 1) / 2 >= best_max) break;
      const int64_t gap = load[M] - load_R;
      const auto& mr = members[R];
      for (size_t ai = 0; ai < members[M].size(); ++ai) {
        const int64_t a = members[M][ai].first;
        // Ideal b = a - gap/2; look at the neighbours of that point in R's sorted areas.
        const auto it = std::lower_bound(mr.begin(), mr.end(), std::make_pair(a - gap / 2, size_t{0}));
        for (auto c = it == mr.begin() ? it : it - 1; c != mr.end() && c <= it; ++c) {
          const int64_t d = a - c->first;
          if (d <= 0 || d >= gap) continue;
          const int64_t new_max = std::max(load[M] - d, load_R + d);
          if (new_max < best_max) {
            best_max = new_max;
            best_R = R;
            best_a = ai;
            best_b = static_cast<size_t>(c - mr.begin());
          }
        }
      }
    }
    if (best_R == W) return;
    auto take = members[M][best_a], give = members[best_R][best_b];
    const int64_t d = take.first - give.first;
    by_load.erase({load[M], M});
    by_load.erase({load[best_R], best_R});
    load[M] -= d;
    load[best_R] += d;
    by_load.insert({load[M], M});
    by_load.insert({load[best_R], best_R});
    owner[take.second] = static_cast<int64_t>(best_R);
    owner[give.second] = static_cast<int64_t>(M);
    members[M].erase(members[M].begin() + static_cast<std::ptrdiff_t>(best_a));
    members[best_R].erase(members[best_R].begin() + static_cast<std::ptrdiff_t>(best_b));
    members[M].insert(std::lower_bound(members[M].begin(), members[M].end(), give), give);
    members[best_R].insert(std::lower_bound(members[best_R].begin(), members[best_R].end(), take), take);
  }
}

}  // namespace

std::vector<int64_t> assign_chunks(const std::vector<int64_t>& areas, int64_t cp, const std::vector<int64_t>& base) {
  CP_CHECK(cp >= 1, "workload_balanced: cp must be a positive integer, got ", cp);
  CP_CHECK(areas.size() % static_cast<size_t>(cp) == 0, "workload_balanced: ", areas.size(),
           " chunks cannot be split evenly over cp=", cp);
  CP_CHECK(base.empty() || base.size() == static_cast<size_t>(cp), "workload_balanced: base loads for ", base.size(),
           " ranks, cp=", cp);
  if (areas.empty()) return {};
  std::vector<int64_t> owner = greedy(areas, cp, static_cast<int64_t>(areas.size()) / cp, base);
  improve_by_swaps(areas, cp, base, owner);
  return owner;
}

}  // namespace workload_balanced

namespace {

class WorkloadBalanced final : public Layout {
 public:
  std::string name() const override { return "workload_balanced"; }
  std::string summary() const override {
    return "data-dependent: chunks of the row assigned so every rank does the same attention work under the "
           "actual mask; pads to a multiple of chunk*W";
  }
  bool data_dependent() const override { return true; }
  // P is always a multiple of W; the actual multiple, chunk * W, depends on the request (chunk_size,
  // or the default rule over seq_len).
  int64_t pad_multiple(int64_t cp) const override { return cp; }

  GlobalLayout compute(const LayoutRequest& req) const override {
    CP_CHECK(req.cp >= 1, "workload_balanced: cp must be a positive integer, got ", req.cp);
    CP_CHECK(req.seq_len >= 1, "workload_balanced: seq_len must be a positive integer, got ", req.seq_len);
    CP_CHECK(req.chunk_size >= 0, "workload_balanced: chunk_size must be >= 0 (0 = default), got ", req.chunk_size);
    CP_CHECK(req.rows.empty() || req.doc_lens.empty(), "workload_balanced: give doc_lens (one row) or rows (a batch), "
             "not both");
    const std::vector<std::vector<int64_t>> rows =
        req.rows.empty() ? std::vector<std::vector<int64_t>>{req.doc_lens} : req.rows;
    for (size_t b = 0; b < rows.size(); ++b) {
      int64_t docs_total = 0;
      const std::string where = req.rows.empty() ? "doc_lens" : detail::concat("rows[", b, "]");
      for (size_t d = 0; d < rows[b].size(); ++d) {
        CP_CHECK(rows[b][d] >= 1, "workload_balanced: ", where, "[", d, "] must be a positive length, got ",
                 rows[b][d]);
        docs_total += rows[b][d];
      }
      CP_CHECK(docs_total <= req.seq_len, "workload_balanced: ", where, " sum to ", docs_total,
               " tokens, more than seq_len ", req.seq_len);
    }
    const MaskSpec& mask = req.mask;
    const int64_t chunk =
        req.chunk_size > 0 ? req.chunk_size : workload_balanced::default_chunk_size(req.seq_len, req.cp);
    const int64_t row_len = layout_math::round_up(req.seq_len, chunk * req.cp);
    const int64_t n = row_len / chunk;  // chunks per row

    GlobalLayout g;
    g.layout = name();
    g.cp = req.cp;
    g.original_seq_len = req.seq_len;
    g.rows = static_cast<int64_t>(rows.size());
    g.padded_seq_len = g.rows * row_len;
    g.ranks.resize(static_cast<size_t>(req.cp));
    for (auto& r : g.ranks) r.reserve(static_cast<size_t>(g.padded_seq_len / req.cp));
    // Row by row: each row's chunks W-way, from the loads the earlier rows left (balanced per row in
    // tokens, over the batch in work).
    std::vector<int64_t> load(static_cast<size_t>(req.cp), 0), areas(static_cast<size_t>(n));
    for (int64_t b = 0; b < g.rows; ++b) {
      const Stream stream = unpacked_stream(req.seq_len, rows[static_cast<size_t>(b)], row_len);
      for (int64_t i = 0; i < n; ++i)
        areas[static_cast<size_t>(i)] = mask_area::run_area(stream, mask, i * chunk, (i + 1) * chunk);
      const std::vector<int64_t> owner = workload_balanced::assign_chunks(areas, req.cp, load);
      // Chunks in index order, so each rank's positions come out ascending.
      for (int64_t i = 0; i < n; ++i) {
        const auto r = static_cast<size_t>(owner[static_cast<size_t>(i)]);
        load[r] += areas[static_cast<size_t>(i)];
        for (int64_t p = i * chunk; p < (i + 1) * chunk; ++p) g.ranks[r].push_back(b * row_len + p);
      }
    }
    return g;
  }
};

}  // namespace

std::unique_ptr<Layout> make_workload_balanced_layout() { return std::make_unique<WorkloadBalanced>(); }

}  // namespace cpbench
