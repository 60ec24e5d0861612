#include "kernels/transports/transport_common.hpp"

#include <cmath>

#include "kernels/attention/sink.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::kernels {

namespace {

bool is_supported_dtype(at::ScalarType t) {
  return t == at::kDouble || t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}
}  // namespace

AttendShape check_attend(const std::string& transport, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const AttentionContext& ctx) {
  CP_CHECK(ctx.comm != nullptr, transport, ": AttentionContext.comm is null");
  AttendShape sh;
  sh.world = ctx.comm->size();
  sh.rank = ctx.comm->rank();
  const auto where = [&] { return detail::concat(" (transport ", transport, ", rank ", sh.rank, ")"); };
  CP_CHECK(q.defined() && k.defined() && v.defined(), "attention inputs must be defined", where());
  CP_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "q, k, v must be [B, H, S, D]; got q ", shape_str(q.sizes()),
           ", k ", shape_str(k.sizes()), ", v ", shape_str(v.sizes()), where());
  CP_CHECK(k.sizes().equals(v.sizes()), "k ", shape_str(k.sizes()), " and v ", shape_str(v.sizes()), " differ",
           where());
  CP_CHECK(q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(3) == k.size(3), "q ", shape_str(q.sizes()),
           " and k ", shape_str(k.sizes()), " must agree on B, S and D", where());
  CP_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "query heads ", q.size(1),
           " are not a multiple of key/value heads ", k.size(1), where());
  CP_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
           "q, k, v dtypes differ: ", q.scalar_type(), ", ", k.scalar_type(), ", ", v.scalar_type(), where());
  CP_CHECK(is_supported_dtype(q.scalar_type()), "dtype ", q.scalar_type(), " is not supported", where());
  CP_CHECK(q.device() == k.device() && q.device() == v.device(), "q, k, v are on different devices", where());
  sh.batch = q.size(0);
  sh.q_heads = q.size(1);
  sh.kv_heads = k.size(1);
  sh.tokens = q.size(2);
  sh.head_dim = q.size(3);
  CP_CHECK(ctx.local.pos.defined() && ctx.local.batch() == sh.batch && ctx.local.tokens() == sh.tokens,
           "ctx.local metadata ", ctx.local.pos.defined() ? shape_str(ctx.local.pos.sizes()) : "(undefined)",
           " must be [B, S] = [", sh.batch, ", ", sh.tokens, "]", where());
  CP_CHECK(ctx.all.pos.defined() && ctx.all.batch() == sh.batch && ctx.all.tokens() == sh.world * sh.tokens,
           "ctx.all metadata ", ctx.all.pos.defined() ? shape_str(ctx.all.pos.sizes()) : "(undefined)",
           " must be [B, W*S] = [", sh.batch, ", ", sh.world * sh.tokens, "] for W = ", sh.world, where());
  if (ctx.plans)
    CP_CHECK(ctx.plans->mask() == ctx.mask && ctx.plans->world() == sh.world && ctx.plans->rank() == sh.rank &&
                 ctx.plans->batch() == sh.batch && ctx.plans->tokens() == sh.tokens,
             "ctx.plans were built for mask ", ctx.plans->mask().to_string(), ", rank ", ctx.plans->rank(), "/",
             ctx.plans->world(), ", [B, S] = [", ctx.plans->batch(), ", ", ctx.plans->tokens(), "]; this call has ",
             ctx.mask.to_string(), ", rank ", sh.rank, "/", sh.world, ", [", sh.batch, ", ", sh.tokens, "]", where());
  if (ctx.mask.kind == MaskSpec::Kind::sliding_window)
    CP_CHECK(ctx.mask.window >= 1, "sliding_window needs a window >= 1, got ", ctx.mask.window, where());
  check_sinks(transport.c_str(), ctx.sinks, sh.q_heads, q.device());
  return sh;
}

TransportState make_state(const AttentionContext& ctx, const AttendShape& shape, const at::Device& device) {
  TransportState st;
  st.comm = *ctx.comm;
  st.mask = ctx.mask;
  st.plans = ctx.plans ? ctx.plans
                       : std::make_shared<const PlanCache>(ctx.mask, ctx.local, ctx.all, shape.rank, shape.world, device);
  st.policy = ctx.flash_numerics ? KernelPolicy::flash_numerics
              : ctx.tiled_kernels  ? KernelPolicy::tiled
                                   : KernelPolicy::fused;
  // A zero scale means "the default", 1/sqrt(D).
  st.scale = ctx.scale > 0 ? ctx.scale : 1.0 / std::sqrt(static_cast<double>(shape.head_dim));
  st.stats = ctx.stats;
  st.nvtx_prefix = ctx.nvtx_prefix;
  st.shape = shape;
  st.device = device;
  st.sink_every_step = ctx.sink_every_step;
  return st;
}

void merge_sink(const TransportState& st, at::Tensor& out, at::Tensor& lse, const at::Tensor& sinks,
                bool after_block) {
  if (!sinks.defined() || !out.defined() || after_block != st.sink_every_step) return;
  apply_sink(out, lse, sinks);
}

at::ScalarType TransportState::kernel_dtype(const at::Tensor& q) const {
  return kernels::kernel_dtype(q.scalar_type(), q.device(), policy);
}

KernelRoute TransportState::route(int src, const at::Tensor& q_kernel) const {
  return block_route(plan(src), q_kernel.scalar_type(), q_kernel.device(), shape.head_dim, policy, shape.q_heads,
                     shape.kv_heads);
}

BlockNumerics TransportState::numerics(at::ScalarType input, bool single_block) const {
  BlockNumerics n;
  if (policy == KernelPolicy::flash_numerics && (input == at::kBFloat16 || input == at::kHalf)) n.rounding.to = input;
  n.kernel_dtype_out = single_block;
  return n;
}

void TransportState::count_block(const BlockPlan& plan, KernelRoute route, CallPairs& pairs) const {
  pairs.visible += plan.work_pairs >= 0 ? plan.work_pairs : plan.visible_pairs;
  pairs.computed += routed_pairs(plan, route, shape.batch);
  if (stats) stats->kernel_blocks[to_string(route)] += 1;
}

void TransportState::count_call(int64_t bytes, const CallPairs& pairs) const {
  if (!stats) return;
  stats->bytes_sent += bytes;
  stats->visible_pairs += pairs.visible;
  const auto forward_flops = [&](int64_t n) {
    return attention_flops(static_cast<double>(n), shape.q_heads, shape.head_dim, AttentionPass::forward);
  };
  stats->flops += forward_flops(pairs.visible);
  stats->flops_computed += forward_flops(pairs.computed);
  stats->calls += 1;
}

std::string common_unsupported_reason(const MaskSpec& mask, const at::TensorOptions& options, int64_t cp) {
  if (cp < 1) return detail::concat("cp must be >= 1, got ", cp);
  if (mask.kind == MaskSpec::Kind::sliding_window && mask.window < 1)
    return detail::concat("sliding_window needs a window >= 1, got ", mask.window);
  const auto dtype = options.dtype().toScalarType();
  if (!is_supported_dtype(dtype))
    return detail::concat("dtype ", dtype, " is not supported (float64, float32, bfloat16, float16)");
  const auto dev = options.device();
  if (!dev.is_cpu() && !dev.is_cuda()) return detail::concat("device ", dev, " is not supported (cpu, cuda)");
  return "";
}

}  // namespace cpbench::kernels

namespace cpbench {

std::shared_ptr<const kernels::PlanCache> make_plan_cache(const MaskSpec& mask, const TokenMeta& local,
                                                          const TokenMeta& all, int rank, int world,
                                                          const at::Device& device) {
  return std::make_shared<const kernels::PlanCache>(mask, local, all, rank, world, device);
}

std::shared_ptr<const kernels::PlanCache> Transport::make_plans(const MaskSpec& mask, const TokenMeta& local,
                                                               const TokenMeta& all, const at::Tensor& /*global_index*/,
                                                               int rank, int world, const at::Device& device) const {
  return make_plan_cache(mask, local, all, rank, world, device);
}

int64_t metadata_plans_built() { return kernels::PlanCache::plans_built(); }

}  // namespace cpbench
