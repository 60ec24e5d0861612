#pragma once
// The reference check of one CP step: its outputs against the single-rank references, tensor by
// tensor (the rules are reference_check.hpp's; docs/correctness.md).
#include <vector>

#include "harness/runner/case_context.hpp"
#include "harness/runner/reference_run.hpp"
#include "reports/result.hpp"

namespace cpbench {

// On the first rank of each CP group (the others return nothing), labelled with the step they come
// from ("first" | "last"). With dp > 1 the replicas exchange their worst scores over the world group
// (collective over it: every rank calls).
[[nodiscard]] std::vector<TensorError> check_outputs(const CaseContext& x, const Outputs& got, const References& ref,
                                                     const char* step);

// Per tensor, the worse of the first and the last checked step.
[[nodiscard]] std::vector<TensorError> worse_of(std::vector<TensorError> first, const std::vector<TensorError>& last);

}  // namespace cpbench
