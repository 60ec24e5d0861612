// Transport "a2a" (Ulysses, DeepSpeed-Ulysses / Transformer Engine's cp_comm_type "a2a"): an
// all-to-all turns this rank's S tokens of all H heads into all W*S tokens of H/W heads, each rank
// attends the whole sequence for its heads (one block, the mask evaluated on every rank's token
// metadata in the order the tokens arrived: kernels/transports/head_parallel.hpp), and a second
// all-to-all brings the output back. Needs H % W == 0; kv heads are replicated when Hkv is not a
// multiple of W (Hk = lcm(Hkv, W)).
//
// With `rank_order_positions` it is the negative control "a2a_rank_order" (a2a_rank_order.cpp).
#include "kernels/transports/head_parallel.hpp"
#include "kernels/transports/head_parallel_costs.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::kernels {

namespace {

class A2aTransport final : public Transport {
 public:
  explicit A2aTransport(bool rank_order_positions) : rank_order_(rank_order_positions) {}

  [[nodiscard]] std::string name() const override { return rank_order_ ? "a2a_rank_order" : "a2a"; }

  [[nodiscard]] std::string unsupported_reason(const MaskSpec& mask, const at::TensorOptions& options,
                                               int64_t cp) const override {
    return common_unsupported_reason(mask, options, cp);
  }

  [[nodiscard]] std::string unsupported_heads(int64_t cp, int64_t q_heads, int64_t kv_heads) const override {
    return head_split_reason(name(), cp, cp, q_heads, kv_heads);
  }

  // MLA, both wires (head_parallel.hpp): expanded K and V split by head like any K/V; the latent
  // all-gathered in the Ulysses group, each rank up-projecting its heads' slice.
  [[nodiscard]] std::string unsupported_mla(MlaWire /*wire*/) const override { return ""; }

  [[nodiscard]] int64_t head_parallel_degree(int64_t cp) const override { return cp; }

  [[nodiscard]] at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const AttentionContext& ctx) const override {
    CP_CHECK(ctx.comm != nullptr, name(), ": AttentionContext.comm is null");
    return head_parallel_attend(options(ctx.comm->size()), q, k, v, ctx);
  }

  [[nodiscard]] std::shared_ptr<const PlanCache> make_plans(const MaskSpec& mask, const TokenMeta& /*local*/,
                                                           const TokenMeta& all, const at::Tensor& global_index,
                                                           int rank, int world, const at::Device& device) const override {
    return head_parallel_plans(options(world), mask, all, global_index, rank, world, device);
  }

  // Two all-to-alls per pass (q, k, v in; the output back), each sending (W-1)/W of the message.
  [[nodiscard]] int64_t bytes_per_call(const CallShape& c) const override { return head_parallel_bytes(c, c.cp); }
  [[nodiscard]] int64_t forward_bytes_per_call(const CallShape& c) const override {
    return head_parallel_forward_bytes(c, c.cp);
  }
  // Every rank computes the mean rank's work (heads split it evenly); the all-to-alls are exposed.
  [[nodiscard]] CallTime time_per_call(const CallCostInputs& in) const override {
    return head_parallel_time(in, in.cp);
  }
  [[nodiscard]] int64_t peak_activation_bytes(const ActivationShape& a) const override {
    return head_parallel_peak_activation_bytes(a, a.cp);
  }

 private:
  [[nodiscard]] HeadParallelOptions options(int world) const {
    return HeadParallelOptions{name(), world, rank_order_};
  }
  bool rank_order_ = false;
};

}  // namespace

std::shared_ptr<const Transport> make_a2a_transport(bool rank_order_positions) {
  return std::make_shared<A2aTransport>(rank_order_positions);
}

}  // namespace cpbench::kernels
