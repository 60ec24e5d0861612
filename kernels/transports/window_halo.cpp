#include "kernels/transports/window_halo.hpp"

#include <algorithm>

#include "sharders/core/check.hpp"

namespace cpbench::kernels {

namespace {
struct Run {
  int64_t begin = 0, end = 0;  // [begin, end) stream positions
  int owner = 0;
};

// A rank's positions as maximal runs of consecutive positions, ascending.
std::vector<Run> runs_of(std::vector<int64_t> positions, int owner) {
  std::sort(positions.begin(), positions.end());
  std::vector<Run> out;
  for (int64_t p : positions) {
    if (!out.empty() && out.back().end == p)
      ++out.back().end;
    else
      out.push_back({p, p + 1, owner});
  }
  return out;
}
}  // namespace

std::vector<int> WindowHalo::steps() const {
  std::vector<int> out;
  for (int64_t d = 1; d < world; ++d)
    for (const auto& row : sent)
      if (row[static_cast<size_t>(d - 1)] > 0) {
        out.push_back(static_cast<int>(d));
        break;
      }
  return out;
}

int64_t WindowHalo::sent_by(int rank) const {
  int64_t n = 0;
  for (int64_t t : sent[static_cast<size_t>(rank)]) n += t;
  return n;
}

int64_t WindowHalo::received_by(int rank) const {
  int64_t n = 0;
  for (int64_t d = 1; d < world; ++d)
    n += sent[static_cast<size_t>(((rank - d) % world + world) % world)][static_cast<size_t>(d - 1)];
  return n;
}

int64_t WindowHalo::steps_of(int rank) const {
  int64_t n = 0;
  for (int64_t d = 1; d < world; ++d) {
    const auto from = static_cast<size_t>(((rank - d) % world + world) % world);
    if (sent[static_cast<size_t>(rank)][static_cast<size_t>(d - 1)] > 0 || sent[from][static_cast<size_t>(d - 1)] > 0)
      ++n;
  }
  return n;
}

WindowHalo window_halo(const std::vector<std::vector<int64_t>>& ranks, int64_t window) {
  CP_CHECK(window >= 1, "window_halo: the window must be >= 1, got ", window);
  const int W = static_cast<int>(ranks.size());
  CP_CHECK(W >= 1, "window_halo: no ranks");
  WindowHalo h;
  h.world = W;
  h.sent.assign(static_cast<size_t>(W), std::vector<int64_t>(static_cast<size_t>(std::max(W - 1, 0)), 0));
  std::vector<std::vector<Run>> own(static_cast<size_t>(W));
  std::vector<Run> all;  // every run, by begin: they tile [0, P)
  for (int r = 0; r < W; ++r) {
    own[static_cast<size_t>(r)] = runs_of(ranks[static_cast<size_t>(r)], r);
    all.insert(all.end(), own[static_cast<size_t>(r)].begin(), own[static_cast<size_t>(r)].end());
  }
  std::sort(all.begin(), all.end(), [](const Run& a, const Run& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < all.size(); ++i)
    CP_CHECK(all[i].begin == (i == 0 ? 0 : all[i - 1].end),
             "window_halo: the ranks' positions do not tile [0, P): ", "rank ", all[i].owner, " has a run from ",
             all[i].begin);
  for (int r = 0; r < W; ++r) {
    // The keys r's queries see: [q - (N - 1), q] for each query q, so a run [a, b) of queries sees
    // [a - (N - 1), b); the union of those intervals (the runs are ascending, so are the intervals).
    std::vector<std::pair<int64_t, int64_t>> seen;
    for (const Run& q : own[static_cast<size_t>(r)]) {
      const int64_t lo = std::max<int64_t>(0, q.begin - (window - 1));
      if (!seen.empty() && lo <= seen.back().second)
        seen.back().second = std::max(seen.back().second, q.end);
      else
        seen.emplace_back(lo, q.end);
    }
    for (const auto& [lo, hi] : seen) {
      auto it = std::upper_bound(all.begin(), all.end(), lo, [](int64_t v, const Run& run) { return v < run.begin; });
      if (it != all.begin()) --it;
      for (; it != all.end() && it->begin < hi; ++it) {
        if (it->owner == r) continue;
        const int64_t n = std::min(hi, it->end) - std::max(lo, it->begin);
        if (n <= 0) continue;
        const int d = ((r - it->owner) % W + W) % W;
        h.sent[static_cast<size_t>(it->owner)][static_cast<size_t>(d - 1)] += n;
      }
    }
  }
  return h;
}

}  // namespace cpbench::kernels
