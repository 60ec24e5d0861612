#include "kernels/transport_common.hpp"

#include <cmath>

#include "sharders/check.hpp"

namespace cpbench::kernels {

namespace {
std::string phase_name(const TransportState& st, Phase::Kind kind) {
  const std::string& prefix = st.nvtx_prefix.empty() ? std::string("cp") : st.nvtx_prefix;
  return prefix + (kind == Phase::Kind::comm ? ":attn_comm" : ":attn_compute");
}

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
  CP_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "q, k, v must be [B, H, S, D]; got q ",
           shape_str(q.sizes()), ", k ", shape_str(k.sizes()), ", v ", shape_str(v.sizes()), where());
  CP_CHECK(k.sizes().equals(v.sizes()), "k ", shape_str(k.sizes()), " and v ", shape_str(v.sizes()), " differ",
           where());
  CP_CHECK(q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(3) == k.size(3), "q ", shape_str(q.sizes()),
           " and k ", shape_str(k.sizes()), " must agree on B, S and D", where());
  CP_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "query heads ", q.size(1),
           " are not a multiple of key/value heads ", k.size(1), where());
  CP_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(), "q, k, v dtypes differ: ",
           q.scalar_type(), ", ", k.scalar_type(), ", ", v.scalar_type(), where());
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
  if (ctx.mask.kind == MaskSpec::Kind::sliding_window)
    CP_CHECK(ctx.mask.window >= 1, "sliding_window needs a window >= 1, got ", ctx.mask.window, where());
  return sh;
}

TransportState make_state(const AttentionContext& ctx, const AttendShape& shape, const at::Device& device) {
  TransportState st;
  st.comm = *ctx.comm;
  st.mask = ctx.mask;
  st.local = ctx.local.to(device);
  st.all = ctx.all.to(device);
  // A zero scale means "the default", 1/sqrt(D).
  st.scale = ctx.scale > 0 ? ctx.scale : 1.0 / std::sqrt(static_cast<double>(shape.head_dim));
  st.stats = ctx.stats;
  st.nvtx_prefix = ctx.nvtx_prefix;
  st.shape = shape;
  return st;
}

BlockPlan TransportState::plan(int src) const {
  return plan_block(build_mask(mask, local, all.narrow(1, src * shape.tokens, shape.tokens)));
}

Wire::Wire(const comm::Communicator& comm, const at::Device& compute_device)
    : device(compute_device), staged(comm.size() > 1 && comm.is_gloo() && !compute_device.is_cpu()) {}

at::Tensor Wire::to_wire(const at::Tensor& t) const {
  return staged ? t.to(at::kCPU).contiguous() : t.contiguous();
}

at::Tensor Wire::from_wire(const at::Tensor& t) const { return staged ? t.to(device) : t; }

at::TensorOptions Wire::options(at::ScalarType dtype) const {
  return at::TensorOptions().dtype(dtype).device(staged ? at::Device(at::kCPU) : device);
}

Phase::Phase(const TransportState& st, Kind kind)
    : stats_(st.stats), kind_(kind), range_{phase_name(st, kind)}, start_(std::chrono::steady_clock::now()) {}

Phase::~Phase() {
  if (!stats_) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  (kind_ == Kind::comm ? stats_->comm_seconds : stats_->compute_seconds) += s;
}

int64_t kv_block_bytes(int64_t batch, int64_t kv_heads, int64_t tokens, int64_t head_dim, int64_t element_size) {
  return 2 * batch * kv_heads * tokens * head_dim * element_size;
}

int64_t grad_element_size(int64_t element_size) { return element_size < 4 ? 4 : element_size; }

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
