#pragma once
// What the delta-rule mixers' registry entries (Gated DeltaNet's gdn_mixer.cpp, Kimi Delta Attention's
// kda_mixer.cpp) price alike: the delta rule's FLOPs (delta_rule_cp_flops) and its core traffic
// (delta_rule_core_traffic: its passes through HBM, head_parallel's all-to-all copies, state passing's
// pairs alone), both from gdn_cp_costs.hpp, the per-channel gate's terms when `kChannelGate` (KDA).
#include <string>

#include "kernels/mixers/gdn/gdn_cp_costs.hpp"
#include "kernels/mixers/linear/linear_mixer.hpp"

namespace cpbench {

template <class Config, bool kChannelGate>
class DeltaRuleMixerOf : public LinearMixerOf<Config> {
 public:
  using LinearMixerOf<Config>::LinearMixerOf;

 protected:
  using typename LinearMixer::CoreTraffic;
  [[nodiscard]] double recurrence_flops(const MixerConfigs& configs, const std::string& strategy,
                                        const LayerCostQuery& q) const override {
    const Config& c = this->config(configs);
    return delta_rule_cp_flops(this->strategy(strategy), this->shape(c, q), c.chunk, kChannelGate);
  }
  [[nodiscard]] CoreTraffic core_traffic(const MixerConfigs& configs, const std::string& strategy,
                                         const LayerCostQuery& q, const LinearCpBytes& bytes) const override {
    const Config& c = this->config(configs);
    return delta_rule_core_traffic(this->strategy(strategy), this->shape(c, q), c.chunk, kChannelGate, bytes);
  }
};

}  // namespace cpbench
