#include "kernels/mixers/linear/state_passing.hpp"

#include <algorithm>

#include "kernels/comm/autograd.hpp"
#include "sharders/core/check.hpp"
#include "sharders/core/nvtx.hpp"

namespace cpbench {

std::shared_ptr<const StatePassingPlan> make_state_passing_plan(const GlobalLayout& g, const TokenMeta& all_meta,
                                                                bool document_reset, int64_t conv, int64_t rank,
                                                                at::ScalarType dtype, const at::Device& device,
                                                                bool drop_incoming_state) {
  const int64_t W = g.cp, Lg = g.padded_seq_len, L = g.local_len(), R = all_meta.batch(), K = conv;
  CP_CHECK(static_cast<int64_t>(g.ranks.size()) == W && rank >= 0 && rank < W, "state passing: layout ", g.layout,
           " has ", g.ranks.size(), " ranks for cp ", W, " (rank ", rank, ")");
  CP_CHECK(all_meta.tokens() == Lg, "state passing: gathered metadata has ", all_meta.tokens(),
           " tokens per row, the layout's stream ", Lg, " (rank ", rank, ")");
  auto sp = std::make_shared<StatePassingPlan>();
  sp->cp = W;
  sp->rank = rank;
  sp->rows = R;
  sp->length = L;
  sp->conv = K;
  sp->drop_incoming_state = drop_incoming_state;

  // The global stream's scan groups and conv windows: the one rule (make_scan_plan), on the host.
  const TokenMeta cpu_meta = all_meta.to(at::kCPU);
  const TokenMeta global = cpu_meta.index_select(1, at::tensor(g.inverse(), at::kLong));
  const ScanPlan gp = make_scan_plan(global, document_reset, K, at::kDouble, at::kCPU);
  const at::Tensor gvalid = global.valid.to(at::kBool).contiguous();
  const int64_t* grp = gp.group.data_ptr<int64_t>();
  const int64_t* gsrc = gp.conv_src.data_ptr<int64_t>();
  const bool* real = gvalid.data_ptr<bool>();
  const auto at_ = [&](int64_t r, int64_t pos) { return static_cast<size_t>(r * Lg + pos); };

  // Every rank's chunks, and their order along the stream (the same on every rank).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> runs(static_cast<size_t>(W));
  for (int64_t q = 0; q < W; ++q) runs[static_cast<size_t>(q)] = contiguous_runs(g.ranks[static_cast<size_t>(q)]);
  sp->slots = max_runs_per_rank(g);
  const int64_t S = sp->slots;
  struct Ref {
    int64_t start, slot;
  };
  std::vector<Ref> refs;
  for (int64_t q = 0; q < W; ++q)
    for (size_t j = 0; j < runs[static_cast<size_t>(q)].size(); ++j)
      refs.push_back({g.ranks[static_cast<size_t>(q)][static_cast<size_t>(runs[static_cast<size_t>(q)][j].first)],
                      q * S + static_cast<int64_t>(j)});
  std::sort(refs.begin(), refs.end(), [](const Ref& a, const Ref& b) { return a.start < b.start; });
  for (const auto& ref : refs) sp->stream_order.push_back(ref.slot);
  const auto& own_runs = runs[static_cast<size_t>(rank)];
  for (size_t j = 0; j < own_runs.size(); ++j) {
    const int64_t slot = rank * S + static_cast<int64_t>(j);
    sp->own_position.push_back(
        std::find(sp->stream_order.begin(), sp->stream_order.end(), slot) - sp->stream_order.begin());
  }

  // The halo: each chunk's last K-1 real tokens per row, tap K-2 the last. halo_row[r, pos] is where a
  // token of another rank lands in this rank's conv input buffer.
  const bool exchange = W > 1 && K > 1;
  const int64_t halo_rows = exchange ? W * S * R * (K - 1) : 0, zero_row = R * L + halo_rows;
  std::vector<int64_t> halo_row(static_cast<size_t>(R * Lg), -1);
  std::vector<int64_t> tail(static_cast<size_t>(S * R * std::max<int64_t>(K - 1, 0)), R * L);
  for (int64_t q = 0; exchange && q < W; ++q) {
    const auto& pos = g.ranks[static_cast<size_t>(q)];
    for (size_t j = 0; j < runs[static_cast<size_t>(q)].size(); ++j) {
      const auto [b, e] = runs[static_cast<size_t>(q)][j];
      for (int64_t r = 0; r < R; ++r) {
        int64_t k = K - 2;
        for (int64_t i = e - 1; i >= b && k >= 0; --i) {
          const int64_t p = pos[static_cast<size_t>(i)];
          if (!real[at_(r, p)]) continue;
          const int64_t index = ((static_cast<int64_t>(j) * R) + r) * (K - 1) + k;
          halo_row[at_(r, p)] = R * L + q * S * R * (K - 1) + index;
          if (q == rank) tail[static_cast<size_t>(index)] = r * L + i;
          --k;
        }
      }
    }
  }

  // This rank's tokens: local scan groups, masks, conv sources.
  const auto& mine = g.ranks[static_cast<size_t>(rank)];
  std::vector<int64_t> local_of(static_cast<size_t>(Lg), -1);
  for (int64_t i = 0; i < L; ++i) local_of[static_cast<size_t>(mine[static_cast<size_t>(i)])] = i;
  std::vector<int64_t> group(static_cast<size_t>(R * L)), valid(static_cast<size_t>(R * L)),
      src(static_cast<size_t>(R * L * K));
  std::vector<uint8_t> prefix(static_cast<size_t>(R * L)), summary(static_cast<size_t>(R * L)),
      carry(static_cast<size_t>(S * R), 0);
  sp->chunks.resize(own_runs.size());
  int64_t next_group = 0;
  for (size_t j = 0; j < own_runs.size(); ++j) {
    const auto [b, e] = own_runs[j];
    StatePassingPlan::Chunk& ch = sp->chunks[j];
    ch.begin = b;
    ch.length = e - b;
    const int64_t start = mine[static_cast<size_t>(b)], end = mine[static_cast<size_t>(e - 1)];
    for (int64_t r = 0; r < R; ++r) {
      // A chunk at the row's start has nothing before it; otherwise what arrives is the state after
      // the token before `start`, which reaches the chunk's tokens up to its first reset.
      const int64_t before = start > 0 ? grp[at_(r, start - 1)] : -1;
      const int64_t last = grp[at_(r, end)];
      carry[j * static_cast<size_t>(R) + static_cast<size_t>(r)] = start > 0 && last == before;
      int64_t prefix_len = 0, previous = -1;
      for (int64_t i = b; i < e; ++i) {
        const int64_t p = mine[static_cast<size_t>(i)], gr = grp[at_(r, p)];
        const size_t li = static_cast<size_t>(r * L + i);
        if (i == b || gr != previous) ++next_group;
        previous = gr;
        group[li] = next_group;
        valid[li] = real[at_(r, p)] ? 1 : 0;
        prefix[li] = start > 0 && gr == before;
        if (prefix[li]) prefix_len = i - b + 1;
        summary[li] = gr == last;
        for (int64_t k = 0; k < K; ++k) {
          const int64_t s = gsrc[at_(r, p) * static_cast<size_t>(K) + static_cast<size_t>(k)];
          const int64_t sr = s / (Lg + 1), spos = s % (Lg + 1);
          int64_t to = zero_row;
          if (spos != Lg) {
            CP_CHECK(sr == r, "state passing: conv source of row ", r, " in row ", sr, " (rank ", rank, ")");
            if (local_of[static_cast<size_t>(spos)] >= 0) {
              to = r * L + local_of[static_cast<size_t>(spos)];
            } else {
              to = halo_row[at_(r, spos)];
              CP_CHECK(to >= 0, "state passing: token ", p, " of row ", r, " reads position ", spos,
                       " of another rank that is not among its chunk's last ", K - 1, " real tokens (rank ", rank,
                       ", layout ", g.layout, ")");
            }
          }
          src[li * static_cast<size_t>(K) + static_cast<size_t>(k)] = to;
        }
      }
      ch.prefix = std::max(ch.prefix, prefix_len);
    }
  }

  const auto bools = [&](const std::vector<uint8_t>& v, std::vector<int64_t> shape) {
    return linear_host_tensor(std::vector<int64_t>(v.begin(), v.end()), device).view(shape).to(at::kBool);
  };
  sp->local.rows = R;
  sp->local.length = L;
  sp->local.group = linear_host_tensor(group, device).view({R, L});
  sp->local.valid = linear_host_tensor(valid, device).view({R, L}).to(dtype);
  sp->local.conv_src = linear_host_tensor(src, device);
  sp->tail_src = linear_host_tensor(tail, device);
  sp->prefix_keep = bools(prefix, {R, L});
  sp->summary_keep = bools(summary, {R, L});
  sp->carry_keep = bools(carry, {S, R});
  return sp;
}

namespace {
// An all-gather sends its block to W-1 ranks; its backward's reduce-scatter sends W-1 blocks back.
void count_all_gather(const LinearStepContext& ctx, const at::Tensor& block, int64_t W) {
  if (ctx.bytes_sent && W > 1) *ctx.bytes_sent += 2 * (W - 1) * static_cast<int64_t>(block.nbytes());
}
}  // namespace

const StatePassingPlan& step_state_passing_plan(const LinearStepContext& ctx, int64_t conv, const char* who) {
  CP_CHECK(ctx.state_passing != nullptr, who, ": state passing without its step plan");
  const StatePassingPlan& sp = *ctx.state_passing;
  CP_CHECK(conv == sp.conv, who, " state passing: conv ", conv, ", the step's plan has ", sp.conv, " (rank ",
           sp.rank, ")");
  return sp;
}

at::Tensor state_passing_taps(const at::Tensor& conv_in, const LinearStepContext& ctx, const char* phase) {
  CP_CHECK(ctx.state_passing != nullptr, "state passing: the step's context has no plan");
  const StatePassingPlan& sp = *ctx.state_passing;
  const int64_t W = sp.cp, R = conv_in.size(0), L = conv_in.size(1), cc = conv_in.size(2), K = sp.conv;
  CP_CHECK(R == sp.rows && L == sp.length, "state passing: conv inputs ", shape_str(conv_in.sizes()),
           ", the step's plan covers [", sp.rows, ", ", sp.length, "] (rank ", sp.rank, ")");
  CP_CHECK(W == 1 || (ctx.comm && ctx.comm->size() == W), "state passing: plan for cp ", W, " (rank ", sp.rank, ")");
  // The conv's input rows: own tokens, every chunk's halo, a zero row (ScanPlan::conv_src's buffer).
  const at::Tensor flat = conv_in.reshape({R * L, cc});
  const at::Tensor zero = at::zeros({1, cc}, flat.options());
  std::vector<at::Tensor> rows{flat};
  if (W > 1 && K > 1) {
    nvtx::Range range{ctx.nvtx, phase};
    const at::Tensor tails = at::cat({flat, zero}).index_select(0, sp.tail_src);  // [slots*R*(K-1), cc]
    rows.push_back(all_gather_autograd(*ctx.comm, tails, 0));
    count_all_gather(ctx, tails, W);
  }
  rows.push_back(zero);
  return at::cat(rows).index_select(0, sp.local.conv_src).view({R, L, K, cc});
}

at::Tensor gather_chunk_summaries(std::vector<at::Tensor> own, const LinearStepContext& ctx, const char* phase) {
  CP_CHECK(ctx.state_passing != nullptr && !own.empty(), "state passing: no plan or no chunk to exchange");
  const StatePassingPlan& sp = *ctx.state_passing;
  while (static_cast<int64_t>(own.size()) < sp.slots) own.push_back(at::zeros_like(own.front()));
  const at::Tensor block = at::stack(own);  // [slots, R, ...]
  nvtx::Range range{ctx.nvtx, phase};
  at::Tensor all = all_gather_autograd(*ctx.comm, block, 0);  // [W * slots, R, ...], slot q*slots + j
  count_all_gather(ctx, block, sp.cp);
  return all;
}

std::vector<at::Tensor> compose_incoming(const StatePassingPlan& sp, const at::Tensor& all, at::Tensor state,
                                         const ComposeStep& apply) {
  std::vector<at::Tensor> incoming(sp.chunks.size());
  const int64_t last = sp.own_position.empty() ? -1 : *std::max_element(sp.own_position.begin(), sp.own_position.end());
  for (int64_t i = 0; i <= last; ++i) {
    for (size_t j = 0; j < sp.chunks.size(); ++j)
      if (sp.own_position[j] == i) incoming[j] = state;
    state = apply(all.select(0, sp.stream_order[static_cast<size_t>(i)]), state);
  }
  return incoming;
}

}  // namespace cpbench
