#pragma once
// Document mixes for the planner: lengths of packed documents drawn from a named distribution.
#include <cstdint>
#include <string>
#include <vector>

namespace cpbench::plan {

// Document lengths drawn from `spec` until `seq_len` tokens are filled (the last one cut to fit):
//   lognormal:mean=M[,sigma=S][,seed=N]   (M = the distribution's mean, sigma of the log; default 1, 0)
//   uniform:min=A,max=B[,seed=N]           (integers in [A, B])
// Deterministic for a spec on every platform (own generator, not <random>'s distributions).
// Bad specs throw cpbench::UsageError naming --doc-dist.
[[nodiscard]] std::vector<int64_t> draw_documents(const std::string& spec, int64_t seq_len);

}  // namespace cpbench::plan
