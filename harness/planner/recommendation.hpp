#pragma once
// Ranking and recommendation (docs/planner.md, "Ranking"): orders the cases of a plan at each W and
// explains in prose why the best one wins, then picks the overall sharder/transport pair and its W.
#include "harness/planner/plan_types.hpp"

namespace cpbench::plan {

// Sets every case's `rank` (1 = best at its cp) and fills plan.recommendation from plan.cases and the
// resolved plan.request (its cps, and sharders / transports order for ties). At each W: cases that
// fit in memory first, then step time in 1% buckets of the best, then fewer segments, then less
// memory, then request order.
void rank_and_recommend(Plan& plan);

}  // namespace cpbench::plan
