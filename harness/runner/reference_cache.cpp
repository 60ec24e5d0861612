#include "harness/runner/reference_cache.hpp"

#include "sharders/core/check.hpp"

namespace cpbench {

std::string reference_problem_key(const ScenarioSpec& s, const CaseSpec& c, int64_t dp_index, const at::Device& device) {
  // The kernels mode is a scenario key today; it is in the key because the 16-bit single-rank run
  // takes the CP kernels under some modes (single_rank_uses_cp_kernels).
  return detail::concat("mask=", c.mask.to_string(), " dtype=", dtype_name(c.dtype), " dp=", dp_index,
                        " device=", device.str(), " kernels=", to_string(s.kernels));
}

std::shared_ptr<const References> ReferenceCache::get(const ScenarioSpec& scenario, const std::string& key,
                                                      bool keep_one, const std::function<References()>& compute,
                                                      bool& reused) {
  // The key leaves out what one scenario fixes (model, batch, seeds): a second scenario's case here
  // would be judged against the first's reference.
  CP_CHECK(&scenario == scenario_, "ReferenceCache: a case of scenario '", scenario.name,
           "' asked the references kept for scenario '", scenario_->name, "' (one cache per loaded scenario)");
  if (const auto it = kept_.find(key); it != kept_.end()) {
    reused = true;
    ++reused_;
    return it->second;
  }
  if (keep_one) kept_.clear();
  auto made = std::make_shared<const References>(compute());
  kept_[key] = made;
  reused = false;
  ++computed_;
  return made;
}

}  // namespace cpbench
