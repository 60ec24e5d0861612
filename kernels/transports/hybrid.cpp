// Transport "hybrid" (Ulysses x ring, USP / yunchang's LongContextAttention, Transformer Engine's
// "a2a+p2p"): the CP group is a U x (W/U) mesh (kernels/transports/head_parallel.hpp). An all-to-all
// inside each Ulysses group of U consecutive ranks makes the group's U*S tokens head-sharded; ring
// attention (the ring transport's code, ring.cpp) then runs across the W/U groups for each head
// slice; an all-to-all brings the output back. U = W is a2a, U = 1 the plain ring.
//
// Layout: the case's layout over the whole W, unchanged (load_balanced: each Ulysses group holds U
// head-tail chunk pairs, so every ring group's work is balanced). yunchang instead zigzags over the
// ring ranks and splits each zigzag chunk contiguously over the Ulysses ranks; both balance the ring,
// cpbench keeps one layout definition (the sharder's) so sharding, gathering and the reference check
// are the same code for every transport (docs/correctness.md).
#include "kernels/transports/head_parallel.hpp"
#include "kernels/transports/head_parallel_costs.hpp"
#include "sharders/core/check.hpp"

namespace cpbench::kernels {

namespace {

class HybridTransport final : public Transport {
 public:
  explicit HybridTransport(int64_t ulysses) : ulysses_(ulysses) {}

  [[nodiscard]] std::string name() const override { return "hybrid"; }

  [[nodiscard]] std::string unsupported_reason(const MaskSpec& mask, const at::TensorOptions& options,
                                               int64_t cp) const override {
    if (ulysses_ < 1 || cp % ulysses_ != 0)
      return detail::concat("hybrid: ulysses ", ulysses_, " does not divide the CP size ", cp);
    return common_unsupported_reason(mask, options, cp);
  }

  [[nodiscard]] std::string unsupported_heads(int64_t cp, int64_t q_heads, int64_t kv_heads) const override {
    return head_split_reason(name(), cp, ulysses_, q_heads, kv_heads);
  }

  // MLA, both wires (head_parallel.hpp): expanded K and V split by head like any K/V; the latent
  // all-gathered in the Ulysses group, each rank up-projecting its heads' slice.
  [[nodiscard]] std::string unsupported_mla(MlaWire /*wire*/) const override { return ""; }

  [[nodiscard]] int64_t head_parallel_degree(int64_t /*cp*/) const override { return ulysses_; }

  [[nodiscard]] at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const AttentionContext& ctx) const override {
    return head_parallel_attend(options(), q, k, v, ctx);
  }

  [[nodiscard]] std::shared_ptr<const PlanCache> make_plans(const MaskSpec& mask, const TokenMeta& /*local*/,
                                                           const TokenMeta& all, const at::Tensor& global_index,
                                                           int rank, int world, const at::Device& device) const override {
    return head_parallel_plans(options(), mask, all, global_index, rank, world, device);
  }

  [[nodiscard]] int64_t bytes_per_call(const CallShape& c) const override { return head_parallel_bytes(c, ulysses_); }
  [[nodiscard]] int64_t forward_bytes_per_call(const CallShape& c) const override {
    return head_parallel_forward_bytes(c, ulysses_);
  }
  [[nodiscard]] CallTime time_per_call(const CallCostInputs& in) const override {
    return head_parallel_time(in, ulysses_);
  }
  [[nodiscard]] int64_t peak_activation_bytes(const ActivationShape& a) const override {
    return head_parallel_peak_activation_bytes(a, ulysses_);
  }

 private:
  [[nodiscard]] HeadParallelOptions options() const { return HeadParallelOptions{name(), ulysses_, false}; }
  int64_t ulysses_ = 1;
};

}  // namespace

std::shared_ptr<const Transport> make_hybrid_transport(const TransportOptions& options) {
  CP_CHECK_USAGE(options.ulysses >= 1, "transport hybrid needs the Ulysses degree (scenario key `ulysses: N`, N >= 1 "
                 "dividing cp), got ", options.ulysses);
  return std::make_shared<HybridTransport>(options.ulysses);
}

}  // namespace cpbench::kernels
