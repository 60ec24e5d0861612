#include "kernels/transports/transport_common.hpp"

#include <cmath>

#include "kernels/attention/mla.hpp"
#include "kernels/attention/sink.hpp"
#include "kernels/transports/kv_passing_costs.hpp"
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
  if (ctx.kv_up.defined()) {
    // MLA's latent wire: k = the latent [B, 1, S, r + dr], no v; W_up [Hq*(dn+dv), r].
    CP_CHECK(q.defined() && k.defined() && !v.defined(), "MLA latent wire: q and the latent k must be defined, v not",
             where());
    CP_CHECK(q.dim() == 4 && k.dim() == 4 && k.size(1) == 1, "MLA latent wire: q must be [B, H, S, dn+dr], k the latent [B, 1, S, r+dr]; got q ",
             shape_str(q.sizes()), ", k ", shape_str(k.sizes()), where());
    const at::Tensor& w = ctx.kv_up;
    CP_CHECK(w.dim() == 2 && k.size(3) > w.size(1), "MLA latent wire: W_up ", shape_str(w.sizes()),
             " must be [H*(dn+dv), r] with r < the latent's ", k.size(3), where());
    const int64_t r = w.size(1), dr = k.size(3) - r, dn = q.size(3) - dr;
    CP_CHECK(dn >= 1 && w.size(0) % q.size(1) == 0 && w.size(0) / q.size(1) > dn, "MLA latent wire: q ",
             shape_str(q.sizes()), ", latent ", shape_str(k.sizes()), " and W_up ", shape_str(w.sizes()),
             " disagree (q's head dim dn + dr, W_up [H*(dn+dv), r])", where());
    CP_CHECK(q.size(0) == k.size(0) && q.size(2) == k.size(2), "q ", shape_str(q.sizes()), " and the latent ",
             shape_str(k.sizes()), " must agree on B and S", where());
    CP_CHECK(q.scalar_type() == k.scalar_type(), "q and the latent dtypes differ: ", q.scalar_type(), ", ",
             k.scalar_type(), where());
    CP_CHECK(is_supported_dtype(q.scalar_type()), "dtype ", q.scalar_type(), " is not supported", where());
    CP_CHECK(q.device() == k.device() && q.device() == w.device(), "q, the latent and W_up are on different devices",
             where());
    sh.latent = true;
    sh.latent_dim = k.size(3);
    sh.qk_nope_head_dim = dn;
    sh.kv_heads = q.size(1);
    sh.v_head_dim = w.size(0) / q.size(1) - dn;
  } else {
    CP_CHECK(q.defined() && k.defined() && v.defined(), "attention inputs must be defined", where());
    CP_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "q, k, v must be [B, H, S, D]; got q ", shape_str(q.sizes()),
             ", k ", shape_str(k.sizes()), ", v ", shape_str(v.sizes()), where());
    // V's head dim may differ from K's (MLA's expanded wire); B, heads and tokens may not.
    CP_CHECK(k.sizes().slice(0, 3).equals(v.sizes().slice(0, 3)), "k ", shape_str(k.sizes()), " and v ",
             shape_str(v.sizes()), " differ in B, heads or S", where());
    CP_CHECK(q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(3) == k.size(3), "q ", shape_str(q.sizes()),
             " and k ", shape_str(k.sizes()), " must agree on B, S and D", where());
    CP_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "query heads ", q.size(1),
             " are not a multiple of key/value heads ", k.size(1), where());
    CP_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
             "q, k, v dtypes differ: ", q.scalar_type(), ", ", k.scalar_type(), ", ", v.scalar_type(), where());
    CP_CHECK(is_supported_dtype(q.scalar_type()), "dtype ", q.scalar_type(), " is not supported", where());
    CP_CHECK(q.device() == k.device() && q.device() == v.device(), "q, k, v are on different devices", where());
    sh.kv_heads = k.size(1);
    sh.v_head_dim = v.size(3);
  }
  sh.batch = q.size(0);
  sh.q_heads = q.size(1);
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

at::Tensor pack_kv(const at::Tensor& k, const at::Tensor& v, const AttendShape& sh) {
  if (sh.latent) return k.unsqueeze(0);
  if (sh.v_head_dim == sh.head_dim) return at::stack({k, v});
  return at::cat({k, v}, -1).unsqueeze(0);
}

std::pair<at::Tensor, at::Tensor> unpack_kv(const at::Tensor& block, const at::Tensor& kv_up, const AttendShape& sh,
                                            at::ScalarType kd) {
  if (sh.latent) {
    auto [k, v] = mla_up_project_block(block[0], kv_up, sh.q_heads, sh.qk_nope_head_dim);
    return {k.to(kd).contiguous(), v.to(kd).contiguous()};
  }
  if (block.size(0) == 2) {
    const at::Tensor kv = block.to(kd);
    return {kv[0], kv[1]};
  }
  const at::Tensor kv = block[0];
  return {kv.narrow(-1, 0, sh.head_dim).to(kd).contiguous(), kv.narrow(-1, sh.head_dim, sh.v_head_dim).to(kd).contiguous()};
}

at::Tensor pack_kv_grad(const at::Tensor& dk, const at::Tensor& dv, const at::Tensor& block, const at::Tensor& kv_up,
                        const AttendShape& sh, at::Tensor& dkv_up) {
  if (sh.latent)
    return mla_up_project_block_grad(block[0], kv_up, sh.q_heads, sh.qk_nope_head_dim, dk, dv, dkv_up).unsqueeze(0);
  if (block.size(0) == 2) return at::stack({dk, dv});
  return at::cat({dk, dv}, -1).unsqueeze(0);
}

int64_t wire_token_elements(const AttendShape& sh) {
  return sh.latent ? sh.latent_dim : sh.kv_heads * (sh.head_dim + sh.v_head_dim);
}

void check_wire_bytes(const TransportState& st, int64_t bytes, bool forward, const std::string& transport,
                      int64_t element_size) {
  const AttendShape& sh = st.shape;
  if (!sh.latent && sh.v_head_dim == sh.head_dim) return;
  CallShape c{st.ring_size(), sh.batch, sh.q_heads, sh.kv_heads, sh.tokens, sh.head_dim, element_size};
  c.kv_token_elements = wire_token_elements(sh);
  const int64_t fwd = kv_passing_forward_bytes(c);
  const int64_t want = forward ? fwd : (transport == "ring" ? ring_bytes(c) : allgather_bytes(c)) - fwd;
  CP_CHECK(bytes == want, transport, " (MLA, ", sh.latent ? "latent" : "expanded", " wire): rank ", sh.rank, " sent ",
           bytes, " bytes in the ", forward ? "forward" : "backward", ", the formula says ", want, " (",
           c.kv_token_elements, " values per token, W = ", c.cp, ", B = ", c.batch, ", S = ", c.local_tokens, ")");
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
  const KernelRoute r = block_route(plan(src), q_kernel.scalar_type(), q_kernel.device(), shape.head_dim, policy,
                                    shape.q_heads, shape.kv_heads);
  // V's head dim not K's (MLA): the fused SDPA kernels here take one head size for q, k and v
  // ("Q/K/V should have the same head size"); the tiled kernel takes both.
  if (shape.v_head_dim != shape.head_dim && r != KernelRoute::skipped) return KernelRoute::tiled;
  return r;
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
  // QK^T at head_dim and PV at v_head_dim: half attention_flops' 4 D per pair each.
  const auto forward_flops_v = [&](int64_t n) {
    return shape.v_head_dim == shape.head_dim
               ? forward_flops(n)
               : 0.5 * (forward_flops(n) + attention_flops(static_cast<double>(n), shape.q_heads, shape.v_head_dim,
                                                           AttentionPass::forward));
  };
  // MLA's latent wire: each key block's up-projection is the kernel's work too.
  double up = 0;
  if (shape.latent) {
    const MlaDims d{shape.latent_dim - (shape.head_dim - shape.qk_nope_head_dim), shape.head_dim - shape.qk_nope_head_dim,
                    shape.qk_nope_head_dim, shape.v_head_dim};
    up = mla_up_projection_flops(d, shape.q_heads,
                                 static_cast<double>(shape.batch * shape.tokens * pairs.up_projected_blocks));
  }
  stats->flops += forward_flops_v(pairs.visible) + up;
  stats->flops_computed += forward_flops_v(pairs.computed) + up;
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
