#pragma once
// Which device a rank computes on and which backend its groups use (torchrun-style environment:
// LOCAL_RANK, LOCAL_WORLD_SIZE). Pure: the runner asks it with the counts it sees; tests ask it directly.
//   cpu                                  -> CPU, Gloo
//   cuda, LOCAL_WORLD_SIZE <= visible    -> GPU LOCAL_RANK, NCCL (a multi-node job gets NCCL too: the
//                                           choice reads the local world size, never the global one)
//   cuda, one visible GPU, LOCAL_WORLD_SIZE > 1, no share_gpu
//                                        -> GPU 0, NCCL: each rank was given its own GPU
//                                           (SLURM's per-task GPU binding, CUDA_VISIBLE_DEVICES per rank);
//                                           were they all the same GPU, NCCL itself refuses the
//                                           duplicate device at the group's eager connect
//   cuda, LOCAL_WORLD_SIZE > visible     -> an error naming both counts, unless the scenario says
//                                           share_gpu: true: then GPU LOCAL_RANK % visible over Gloo,
//                                           labelled in the report (backend "gloo", shared_gpu "true")
#include <string>

#include "kernels/comm/process_group.hpp"

namespace cpbench {

struct DeviceChoice {
  bool cuda = false;
  int device_index = -1;  // CUDA device, -1 on the CPU
  comm::BackendKind backend = comm::BackendKind::gloo;
  bool shared_gpu = false;  // several local ranks on one GPU (Gloo)
};

// Throws UsageError for a job that cannot run as asked (more local ranks than GPUs without share_gpu,
// LOCAL_RANK outside LOCAL_WORLD_SIZE, no GPU visible).
[[nodiscard]] DeviceChoice choose_device(bool cuda, int local_rank, int local_world_size, int visible_gpus,
                                         bool share_gpu);

// The GEMM numerics both sides of the reference check run with on a GPU: cuBLAS's reduced-precision
// reductions for bf16 / fp16 GEMMs (its split-K partial sums held in 16 bits, torch's default) are
// disallowed, split-K itself stays allowed. Why: that reduction rounds differently for the single
// rank's S rows than for a CP rank's S / W rows, noise the precision rule would charge to CP.
// Process-wide (at::globalContext()); the runner calls it for `device: cuda` cases before the model
// is built. Harmless on the CPU.
void use_full_precision_gemm_reductions();

}  // namespace cpbench
