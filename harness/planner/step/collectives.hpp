#pragma once
// The collectives of the parallel dimensions other than CP and EP (CP: the transports, attention.hpp; EP:
// moe.hpp), per GPU and step (docs/planner.md, "The whole step"). n = dp x cp (the ZeRO / FSDP group, as
// torchtitan shards over dp_shard x cp), P = the GPU's parameters before sharding (params.hpp), dense part
// over n ranks, routed experts over n / ep; ring collectives send (g - 1) / g of the whole per GPU:
//   zero 3 (FSDP)  per micro-batch: all-gather forward + all-gather backward (2 B per parameter each) and
//                  a reduce-scatter of the gradients (grad_reduce_bytes per parameter)
//   zero 2         per micro-batch a reduce-scatter of the gradients; per step an all-gather of the updated
//                  parameters
//   zero 1         per step a reduce-scatter of the accumulated gradients and an all-gather of the parameters
//   zero 0 (DDP)   per step an all-reduce of the gradients (2 x a reduce-scatter's bytes)
//   TP + SP        per layer and pass, per sub-block (the mixer, the MLP / MoE): an all-gather and a
//                  reduce-scatter of the micro-batch's activations X = b S / cp x h x 2 B: 2 (tp - 1) / tp X;
//                  passes: forward (twice under full recompute) + backward
//   PP             per micro-batch and virtual stage a send of the activations forward and of their
//                  gradient backward (sequence parallel: X / tp); its bubble is in step.hpp
// time_s here is the transfer time on the group's link (+ latency per message); step.cpp decides the
// exposed part with the dimension's overlap (constants.hpp).
#include "harness/planner/step/case_shape.hpp"
#include "harness/planner/step/params.hpp"

namespace cpbench::plan::step {

// "comm:fsdp" for zero 3, else "comm:dp".
[[nodiscard]] Component shard_component(const CaseShape& s, const GpuParams& p);
[[nodiscard]] Component tp_component(const CaseShape& s);
[[nodiscard]] Component pp_component(const CaseShape& s);

}  // namespace cpbench::plan::step
