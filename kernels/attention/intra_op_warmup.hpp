#pragma once
// The first vector-math calls of a process, made where their results are thrown away (issue 38 item 6).
//
// In a fresh process, the first at::exp large enough to run on the intra-op (OpenMP) threads could come
// back wrong on the worker thread's chunk: ATen hands float / double exp, log, tanh, ... to MKL's VML
// (at::vml, mode VML_HA), and the worker's first call of the process returned a discrete other result
// (float exp 1.5e-4 relative off, every time the same values), while the main thread's chunk and every
// later call were right. The first attention of a process then had one parallel chunk wrong
// (unit.FlashNumerics: 72 rows of one head; unit.Dtypes/FusedBlock: 6e-10 in float64). Measured:
// the first exp of a fresh unit-test process differed from its repeat in 3 of 200 processes under load.
//
// warm_intra_op_math() makes those first calls: on the calling thread, then on every intra-op thread
// in one parallel region, for float and double, results discarded. It runs once before main in every
// binary that links the attention kernels (tiled_kernel.cpp) and again whenever the intra-op thread
// count has grown past the count last warmed (new threads are fresh); cheap (< 1 ms) when it runs,
// one atomic load when it does not.
#include <cstdint>

namespace cpbench::kernels {

// Warms the VML functions ATen routes through MKL on this thread and on every intra-op thread, unless
// the current intra-op thread count was already warmed. Returns the count warmed (or already warm).
int64_t warm_intra_op_math();

// For the plant test only: whether the next warm_intra_op_math() is skipped (the cause re-introduced).
// Read from the environment variable CPBENCH_SKIP_MATH_WARMUP=1 at the first call.
bool intra_op_warmup_skipped();

}  // namespace cpbench::kernels
