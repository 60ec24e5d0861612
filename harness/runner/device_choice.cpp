#include "harness/runner/device_choice.hpp"

#include <ATen/Context.h>

#include "sharders/core/check.hpp"

namespace cpbench {

DeviceChoice choose_device(bool cuda, int local_rank, int local_world_size, int visible_gpus, bool share_gpu) {
  DeviceChoice d;
  CP_CHECK_USAGE(local_world_size >= 1 && local_rank >= 0 && local_rank < local_world_size, "LOCAL_RANK=", local_rank,
                 " is outside LOCAL_WORLD_SIZE=", local_world_size);
  if (!cuda) return d;
  d.cuda = true;
  CP_CHECK_USAGE(visible_gpus >= 1, "device: cuda, but no CUDA GPU is visible to this rank");
  if (local_world_size <= visible_gpus) {
    d.device_index = local_rank;
    d.backend = comm::BackendKind::nccl;
    return d;
  }
  if (visible_gpus == 1 && !share_gpu) {
    // One GPU visible to a rank of several on the node: per-rank binding (each rank sees only its
    // own GPU, as index 0), not several ranks on one GPU, which a scenario asks for with share_gpu.
    d.device_index = 0;
    d.backend = comm::BackendKind::nccl;
    return d;
  }
  CP_CHECK_USAGE(share_gpu, "device: cuda with ", local_world_size, " ranks on this node but ", visible_gpus,
                 " visible GPU(s): NCCL needs one GPU per rank. Run at most ", visible_gpus,
                 " ranks per node, or set `share_gpu: true` in the scenario to share GPUs over Gloo");
  d.device_index = local_rank % visible_gpus;
  d.shared_gpu = true;
  return d;
}

void use_full_precision_gemm_reductions() {
  at::globalContext().setAllowBF16ReductionCuBLAS(/*allow_reduced_precision=*/false, /*allow_splitk=*/true);
  at::globalContext().setAllowFP16ReductionCuBLAS(/*allow_reduced_precision=*/false, /*allow_splitk=*/true);
}

}  // namespace cpbench
