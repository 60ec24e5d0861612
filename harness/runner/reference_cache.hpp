#pragma once
// The single-rank references a rank process keeps across the cases it runs (docs/correctness.md, "One
// reference per problem"). cpbench's launcher runs every case of one world size in the same rank
// processes, and the cases of a scenario share the model, the batch and the kernels mode: cases that
// differ only in sharder, transport, CP size or control are checked against the same single-rank run,
// so cp-rank 0 computes it once and every such case reuses it. Why in the rank's memory and not on
// disk: nothing is serialized or read back (the check compares the very tensors the reference left),
// and a rank process holds exactly one loaded scenario, so the problem's fixed parts cannot change
// under the cache.
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "harness/runner/reference_run.hpp"

namespace cpbench {

// What makes two cases' single-rank references the same computation, given one loaded scenario (its
// model and seed, batch and seed, kernels mode): the mask, the dtype, the data-parallel replica (each
// has its own batch, harness/model/data.hpp) and the device. Cases with equal keys have bit-identical
// references; sharder, transport, CP size, Ulysses degree, the SSM / GDN CP strategies and the
// negative control are not part of it (the reference runs none of them).
[[nodiscard]] std::string reference_problem_key(const ScenarioSpec& s, const CaseSpec& c, int64_t dp_index,
                                                const at::Device& device);

class ReferenceCache {
 public:
  // `scenario` outlives the cache: every case it serves is one of this scenario's.
  explicit ReferenceCache(const ScenarioSpec& scenario) : scenario_(&scenario) {}

  // The references of `key`'s problem: kept ones (`reused` true), else `compute()`'s, then kept.
  // With `keep_one` (device: cuda, where admission plans device memory for one case's reference at a
  // time) every other problem's references are dropped before computing, so at most one is held;
  // otherwise (host memory) every distinct problem's are kept for the process's life.
  [[nodiscard]] std::shared_ptr<const References> get(const ScenarioSpec& scenario, const std::string& key,
                                                      bool keep_one, const std::function<References()>& compute,
                                                      bool& reused);

  [[nodiscard]] int64_t computed() const { return computed_; }
  [[nodiscard]] int64_t reused() const { return reused_; }

 private:
  const ScenarioSpec* scenario_;
  std::map<std::string, std::shared_ptr<const References>> kept_;
  int64_t computed_ = 0, reused_ = 0;
};

}  // namespace cpbench
