#include "kernels/mixers/linear/linear_step.hpp"

#include "kernels/comm/autograd.hpp"
#include "kernels/mixers/linear/state_passing.hpp"
#include "sharders/core/check.hpp"
#include "sharders/core/nvtx.hpp"

namespace cpbench {

void push_range(std::vector<int64_t>& out, int64_t start, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out.push_back(start + i);
}

namespace {
// An all-to-all sends (W-1)/W of what it exchanges; its backward runs it again in reverse.
void count_all_to_all(const LinearStepContext& ctx, const at::Tensor& exchanged, int64_t W) {
  if (ctx.bytes_sent && W > 1) *ctx.bytes_sent += 2 * static_cast<int64_t>(exchanged.nbytes()) / W * (W - 1);
}
}  // namespace

namespace {

// Fills send_channels, conv_channels and heads for rank r of W (W = 1: every channel, in order).
void set_channel_indices(LinearStepContext& ctx, const RankChannels& channels, int64_t heads, int64_t W, int64_t r,
                         const at::Device& device) {
  std::vector<int64_t> send;
  for (int64_t q = 0; q < W; ++q) {
    const auto ch = channels(W, q, false);
    send.insert(send.end(), ch.begin(), ch.end());
  }
  std::vector<int64_t> mine;
  for (int64_t i = 0; i < heads / W; ++i) mine.push_back(r * (heads / W) + i);
  ctx.send_channels = linear_host_tensor(send, device);
  ctx.conv_channels = linear_host_tensor(channels(W, r, true), device);
  ctx.heads = linear_host_tensor(mine, device);
}

void check_cp_inputs(const char* who, const comm::Communicator& comm, const GlobalLayout& g, const TokenMeta& all_meta) {
  CP_CHECK(all_meta.tokens() == g.padded_seq_len && g.cp == comm.size(), who, ": gathered metadata has ",
           all_meta.tokens(), " tokens per row for a ", g.layout, " stream of ", g.padded_seq_len, " over cp ", g.cp,
           ", the communicator has ", comm.size(), " ranks");
}

TokenMeta set_global_order(LinearStepContext& ctx, const GlobalLayout& g, const TokenMeta& all_meta,
                           bool undo_chunk_order, const at::Device& device) {
  if (!undo_chunk_order) return all_meta;
  // The layout's one map, both ways: rank-order concatenation <-> global stream order.
  std::vector<int64_t> rank_order;
  rank_order.reserve(static_cast<size_t>(g.padded_seq_len));
  for (const auto& r : g.ranks) rank_order.insert(rank_order.end(), r.begin(), r.end());
  ctx.to_rank_order = linear_host_tensor(rank_order, device);
  ctx.to_global = linear_host_tensor(g.inverse(), device);
  return all_meta.index_select(1, ctx.to_global.to(all_meta.pos.device()));
}

}  // namespace

void fill_single_rank_context(LinearStepContext& ctx, const LinearLayerSpec& spec, const TokenMeta& meta,
                              const MaskSpec& mask, at::ScalarType dtype, const at::Device& device) {
  ctx.chunk = spec.chunk;
  ctx.plan = make_scan_plan(meta, mask.same_document(), spec.conv, dtype, device);
  set_channel_indices(ctx, spec.channels, spec.heads, 1, 0, device);
}

int64_t fill_cp_context(LinearStepContext& ctx, const LinearLayerSpec& spec, const comm::Communicator& comm,
                        const GlobalLayout& g, const TokenMeta& all_meta, const MaskSpec& mask, at::ScalarType dtype,
                        const at::Device& device, std::string nvtx, const LinearCpRequest& request) {
  check_cp_inputs(spec.who, comm, g, all_meta);
  ctx.comm = &comm;
  ctx.nvtx = std::move(nvtx);
  ctx.chunk = spec.chunk;
  if (request.state_passing) {
    auto sp = make_state_passing_plan(g, all_meta, mask.same_document(), spec.conv, comm.rank(), dtype, device,
                                      request.drop_incoming_state);
    const int64_t slots = sp->slots;
    ctx.plan = sp->local;
    ctx.drop_incoming_state = request.drop_incoming_state;
    ctx.state_passing = std::move(sp);
    return slots;
  }
  const std::string why = spec.split_reason(comm.size());
  CP_CHECK(why.empty(), spec.who, ": ", why, " (rank ", comm.rank(), ")");
  set_channel_indices(ctx, spec.channels, spec.heads, comm.size(), comm.rank(), device);
  const TokenMeta scan_meta = set_global_order(ctx, g, all_meta, request.undo_chunk_order, device);
  ctx.plan = make_scan_plan(scan_meta, mask.same_document(), spec.conv, dtype, device);
  return 1;
}

at::Tensor channel_parallel_gather(const at::Tensor& proj, const LinearStepContext& ctx, const char* phase,
                                   const char* who) {
  const int64_t W = ctx.comm ? ctx.comm->size() : 1, r = ctx.comm ? ctx.comm->rank() : 0;
  CP_CHECK(ctx.send_channels.defined(), who, ": the step's context has no channel-parallel index tensors (rank ", r,
           ")");
  at::Tensor mine;  // [R, W * S_local, channels], rank order
  {
    nvtx::Range range{ctx.nvtx, phase};
    const at::Tensor blocks = proj.index_select(2, ctx.send_channels);
    mine = ctx.comm ? all_to_all_autograd(*ctx.comm, blocks, 2, 1, {ctx.nvtx, nullptr}) : blocks;
    count_all_to_all(ctx, blocks, W);
  }
  if (ctx.to_global.defined()) mine = mine.index_select(1, ctx.to_global);
  CP_CHECK(ctx.plan.rows == proj.size(0) && ctx.plan.length == mine.size(1), who, ": the plan covers [",
           ctx.plan.rows, ", ", ctx.plan.length, "], the gathered stream is [", proj.size(0), ", ", mine.size(1),
           "] (rank ", r, ")");
  return mine;
}

at::Tensor channel_parallel_return(const at::Tensor& y, const LinearStepContext& ctx, const char* phase) {
  const int64_t W = ctx.comm ? ctx.comm->size() : 1;
  const at::Tensor ordered = ctx.to_rank_order.defined() ? y.index_select(1, ctx.to_rank_order) : y;
  nvtx::Range range{ctx.nvtx, phase};
  at::Tensor out = ctx.comm ? all_to_all_autograd(*ctx.comm, ordered, 1, 2, {ctx.nvtx, nullptr}) : ordered;
  count_all_to_all(ctx, ordered, W);
  return out;
}

at::Tensor conv_taps(const at::Tensor& xs, const ScanPlan& plan, int64_t K) {
  const int64_t R = xs.size(0), L = xs.size(1), cc = xs.size(2);
  const at::Tensor padded = at::cat({xs, at::zeros({R, 1, cc}, xs.options())}, 1).reshape({R * (L + 1), cc});
  return padded.index_select(0, plan.conv_src).view({R, L, K, cc});
}

}  // namespace cpbench
