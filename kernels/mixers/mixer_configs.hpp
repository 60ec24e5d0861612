#pragma once
// The sizes of every registered mixer's layers, one member per mixer: what a model config carries
// beside its own dimensions. The registry (registry.cpp) says which member is whose
// (Mixer::config_fields); a new mixer with sizes adds one member here.
#include "kernels/mixers/attention/attention_config.hpp"
#include "kernels/mixers/gdn/gdn_config.hpp"
#include "kernels/mixers/kda/kda_config.hpp"
#include "kernels/mixers/mamba/mamba_config.hpp"

namespace cpbench {

struct MixerConfigs {
  SsmConfig ssm;  // the `M` layers' (model.ssm)
  GdnConfig gdn;  // the `G` layers' (model.gdn)
  KdaConfig kda;  // the `K` layers' (model.kda)
  AttentionConfig attention;  // the `A` layers' (model.attention)
};

}  // namespace cpbench
