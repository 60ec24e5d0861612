#pragma once
// Communication measured like nccl-tests: each collective a case's step issued (recorded by the
// communicator's call log, at the step's own message sizes), run alone on the case's CP group for a
// few iterations. algbw = bytes / time and busbw = algbw * the nccl-tests bus factor of the collective
// (docs/measurement.md), next to the link's nominal bandwidth.
#include <vector>

#include "kernels/comm/communicator.hpp"
#include "reports/result.hpp"

namespace cpbench {

// nccl-tests' bus factor for a collective over `ranks` ranks: all_gather, reduce_scatter, all_to_all
// (W-1)/W; all_reduce 2(W-1)/W; sendrecv 1. The one place these factors live.
[[nodiscard]] double bus_factor(const std::string& collective, int64_t ranks);

// The distinct (collective, bytes) of `log` with how often each occurred, the `keep` largest by bytes
// per step first (ties: by name). Collectives under 1 KiB (counts, loss sums) are left out.
[[nodiscard]] std::vector<CollectiveBandwidth> distinct_collectives(const comm::CallLog& log, size_t keep);

// Times each entry of `calls` on `comm` (1 warm-up + `iters` timed runs, each between barriers; the
// slowest rank's median) and fills time_s, algbw, busbw, bus_factor. Collective over `comm`: every rank
// passes the same list (the step issued the same collectives on every rank). `device`: where the
// buffers live (the group's device under NCCL; CPU under Gloo).
void measure_collectives(const comm::Communicator& comm, const at::Device& device,
                         std::vector<CollectiveBandwidth>& calls, int iters = 5);

}  // namespace cpbench
