// The mixer registry (kernels/mixers/mixer.hpp): every mixer is found by its letter and name, an unknown
// letter or strategy is refused listing the known ones, the model composes its layers from the registry
// (the parameters each mixer registers, in the draw order that fixes their values), each mixer's config
// keys are its scenario keys, and the consumers that used to name mixers (case names, report axes,
// admission, the controls) now get the same answers from the registry.
#include <gtest/gtest.h>

#include <set>

#include "harness/model/model.hpp"
#include "harness/planner/presets.hpp"
#include "harness/runner/scenario.hpp"
#include "kernels/controls/control.hpp"
#include "kernels/mixers/mixer.hpp"
#include "sharders/core/check.hpp"
#include "tests/unit/scenario_test_util.hpp"

using namespace cpbench;

namespace {

using scenario_test::refusal;

std::set<std::string> parameter_names(const ModelConfig& c) {
  TinyTransformer m(c, at::kDouble, at::kCPU);
  std::set<std::string> names;
  for (const auto& p : m->named_parameters()) names.insert(p.key());
  return names;
}

}  // namespace

TEST(MixerRegistry, LettersNamesAndStrategiesAreUniqueAndFound) {
  std::set<char> letters;
  std::set<std::string> names, axes;
  for (const auto& m : mixers()) {
    EXPECT_TRUE(letters.insert(m->letter()).second) << m->letter();
    EXPECT_TRUE(names.insert(m->name()).second) << m->name();
    EXPECT_EQ(&mixer_for(m->letter()), m.get());
    EXPECT_EQ(find_mixer(m->name()), m.get());
    if (!m->strategy_axis().empty()) {
      EXPECT_TRUE(axes.insert(m->strategy_axis()).second) << m->strategy_axis();
      ASSERT_FALSE(m->strategies().empty()) << m->name();
      EXPECT_EQ(m->case_suffix(m->strategies().front()), "") << "the default strategy leaves the case name alone";
    }
  }
  EXPECT_EQ(letters, (std::set<char>{'A', 'M', 'G', 'K'}));
  EXPECT_EQ(axes, (std::set<std::string>{"ssm_cp", "gdn_cp", "kda_cp"}));
  EXPECT_EQ(find_mixer("rwkv"), nullptr);
  try {
    (void)mixer_for('X');
    FAIL() << "an unknown letter was found";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown mixer letter 'X'; known mixers: A (attention), M (Mamba), G (Gated DeltaNet), K (Kimi Delta Attention)"),
              std::string::npos)
        << e.what();
  }
}

// Every mixer with layers of its own has a three-layer preset (its letter around one attention layer),
// known to the scenario reader and the planner by the same name; an unknown preset lists them all.
TEST(MixerRegistry, EachMixerHasItsThreeLayerPreset) {
  std::vector<std::string> want{"tiny"};
  for (const auto& m : mixers()) {
    if (m->letter() == kDefaultMixer) {
      EXPECT_EQ(m->preset(), "") << "attention's preset is tiny itself";
      continue;
    }
    ASSERT_FALSE(m->preset().empty()) << m->name();
    want.push_back(m->preset());
    const ModelConfig c = ModelConfig::preset_named(m->preset());
    EXPECT_EQ(c.mixers, std::string({m->letter(), kDefaultMixer, m->letter()})) << m->preset();
    EXPECT_EQ(c.layers, 3) << m->preset();
    EXPECT_EQ(plan::model_preset(m->preset()).mixers, c.mixers) << m->preset();
  }
  want.emplace_back("small");
  EXPECT_EQ(ModelConfig::preset_names(), want);
  EXPECT_EQ(ModelConfig::preset_named("tiny-hybrid").mixers, "MAM");  // the names users' scenarios carry
  EXPECT_EQ(ModelConfig::preset_named("tiny-gdn").mixers, "GAG");
  try {
    (void)ModelConfig::preset_named("tiny-rwkv");
    FAIL() << "an unknown preset was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("known presets: tiny, tiny-hybrid, tiny-gdn"), std::string::npos)
        << e.what();
  }
}

TEST(MixerRegistry, UnknownLettersAndStrategiesListTheKnownOnes) {
  EXPECT_NE(refusal("model: {layers: 2, mixers: AX}\nsweep: {cp: 1}\n")
                .find("known mixers: A (attention), M (Mamba), G (Gated DeltaNet), K (Kimi Delta Attention)"),
            std::string::npos)
      << refusal("model: {layers: 2, mixers: AX}\nsweep: {cp: 1}\n");
  EXPECT_NE(refusal("model: {preset: tiny-hybrid}\nsweep: {cp: 2, ssm_cp: ring}\n")
                .find("unknown SSM CP strategy \"ring\"; known: hidden_parallel, state_passing"),
            std::string::npos);
  EXPECT_NE(refusal("model: {preset: tiny}\nsweep: {cp: 2, ssm_cp: state_passing}\n")
                .find("needs a model with Mamba layers (model.mixers with M)"),
            std::string::npos);
  EXPECT_NE(refusal("model: {preset: tiny-gdn, gdn: {heads: 3}}\nsweep: {cp: 1}\n").find("model.gdn.heads"),
            std::string::npos)
      << "a mixer's config keys are its fields";
}

// The model's layers come from the registry: each layer's parameters are the ones its mixer registers,
// under the same names as before the registry (reports name gradients by them).
TEST(MixerRegistry, TheModelComposesItsLayersByLetter) {
  ModelConfig c = ModelConfig::preset_named("tiny");
  c.layers = 3;
  c.mixers = "MAG";
  const auto names = parameter_names(c);
  for (const char* p : {"layer0_ssm_norm", "layer0_in_proj", "layer0_conv_w", "layer0_conv_b", "layer0_dt_bias",
                        "layer0_A_log", "layer0_D", "layer0_out_proj", "layer1_attn_norm", "layer1_wq", "layer1_wk",
                        "layer1_wv", "layer1_wo", "layer2_gdn_norm", "layer2_gdn_in_proj", "layer2_gdn_conv_w",
                        "layer2_gdn_dt_bias", "layer2_gdn_A_log", "layer2_gdn_norm_w", "layer2_gdn_out_proj"})
    EXPECT_TRUE(names.count(p)) << p;
  EXPECT_FALSE(names.count("layer1_in_proj")) << "an attention layer has no SSM parameters";
  // Parameters are a pure function of (config, seed): the same model twice is the same model.
  TinyTransformer a(c, at::kDouble, at::kCPU), b(c, at::kDouble, at::kCPU);
  const auto pa = a->named_parameters(), pb = b->named_parameters();
  for (const auto& p : pa) EXPECT_TRUE(at::equal(p.value(), pb[p.key()])) << p.key();
}

// Case names, report axes and control refusals come from the registry's strategy axes.
TEST(MixerRegistry, CaseNamesAndControlsAskTheRegistry) {
  const ScenarioSpec s = parse_scenario(
      "model: {preset: tiny-hybrid}\nsweep: {sharder: load_balanced, cp: 2, ssm_cp: [hidden_parallel, state_passing]}\n",
      "x.yaml");
  ASSERT_EQ(s.cases.size(), 2u);
  EXPECT_EQ(s.cases[0].name(), "load_balanced/allgather/cp2/causal/float64");
  EXPECT_EQ(s.cases[1].name(), "load_balanced/allgather/cp2/causal/float64/state_passing");
  EXPECT_EQ(s.cases[1].mixer_strategy(mixer_for('M')), "state_passing");
  EXPECT_EQ(s.cases[1].mixer_strategy(mixer_for('G')), "head_parallel") << "the default on an axis not given";
  const ScenarioSpec g = parse_scenario("model: {preset: tiny-gdn}\nsweep: {cp: 2, gdn_cp: state_passing}\n", "x.yaml");
  EXPECT_EQ(g.cases.at(0).name(), "load_balanced/allgather/cp2/causal/float64/gdn_state_passing");
  // Every mixer's controls are registered, each refusing a case it cannot show in.
  for (const auto& m : mixers())
    for (const auto& spec : m->controls()) {
      const Control* c = find_control(spec.name);
      ASSERT_NE(c, nullptr) << spec.name;
      EXPECT_EQ(c->cannot_show({2, {{m->name(), spec.strategy}}}), "") << spec.name;
      EXPECT_NE(c->cannot_show({2, {}}), "") << spec.name << " without its mixer";
      EXPECT_EQ(c->mixer_fault(m->name(), {1, 2, at::kDouble}), spec.fault) << spec.name;
    }
}
