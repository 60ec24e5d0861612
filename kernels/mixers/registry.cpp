// The mixer registry: one line per mixer (each lives in its own folder under kernels/mixers/).
#include <algorithm>

#include "kernels/mixers/mixer.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

std::unique_ptr<Mixer> make_attention_mixer();  // kernels/mixers/attention/
std::unique_ptr<Mixer> make_mamba_mixer();      // kernels/mixers/mamba/
std::unique_ptr<Mixer> make_gdn_mixer();        // kernels/mixers/gdn/
std::unique_ptr<Mixer> make_kda_mixer();        // kernels/mixers/kda/

const std::vector<std::unique_ptr<Mixer>>& mixers() {
  static const std::vector<std::unique_ptr<Mixer>> all = [] {
    std::vector<std::unique_ptr<Mixer>> v;
    for (const auto& make : {make_attention_mixer, make_mamba_mixer, make_gdn_mixer, make_kda_mixer}) v.push_back(make());
    return v;
  }();
  return all;
}

std::string known_mixer_letters() {
  std::string out;
  for (const auto& m : mixers())
    out += (out.empty() ? "" : ", ") + std::string(1, m->letter()) + " (" + m->description() + ")";
  return out;
}

const Mixer& mixer_for(char letter, const std::string& key) {
  for (const auto& m : mixers())
    if (m->letter() == letter) return *m;
  throw UsageError(detail::concat(key, ": unknown mixer letter '", std::string(1, letter),
                                  "'; known mixers: ", known_mixer_letters()));
}

const Mixer* find_mixer(const std::string& name) {
  for (const auto& m : mixers())
    if (m->name() == name) return m.get();
  return nullptr;
}

const Mixer* find_hf_mixer(const std::string& model_type, const std::string& hf_name) {
  for (const auto& m : mixers())
    if (!hf_name.empty() && m->hf_layer_name(model_type) == hf_name) return m.get();
  return nullptr;
}

std::string known_hf_layer_names(const std::string& model_type) {
  std::string out;
  for (const auto& m : mixers())
    if (const std::string n = m->hf_layer_name(model_type); !n.empty())
      out += (out.empty() ? "" : ", ") + n + " (" + m->description() + ")";
  return out;
}

int64_t count_layers(const std::string& mixers, int64_t layers, char letter) {
  if (mixers.empty()) return letter == kDefaultMixer ? layers : 0;
  return static_cast<int64_t>(std::count(mixers.begin(), mixers.end(), letter));
}

std::vector<const Mixer*> mixers_in(const std::string& letters) {
  std::vector<const Mixer*> out;
  for (const auto& m : mixers())
    if ((letters.empty() && m->letter() == kDefaultMixer) || letters.find(m->letter()) != std::string::npos)
      out.push_back(m.get());
  return out;
}

}  // namespace cpbench
