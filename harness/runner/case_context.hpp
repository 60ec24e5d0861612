#pragma once
// Everything one rank of a case holds: device and process groups, the data, the model, the layout, the
// transport (decorated by the case's negative control, if any). Built once per case by setup_case;
// the step, the check and the measurement read it.
#include <optional>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "harness/model/data.hpp"
#include "harness/model/model.hpp"
#include "harness/runner/scenario.hpp"
#include "kernels/comm/communicator.hpp"
#include "kernels/comm/process_group.hpp"
#include "kernels/controls/control.hpp"
#include "kernels/transports/transport.hpp"
#include "sharders/registry.hpp"

namespace cpbench {

class ReferenceCache;  // harness/runner/reference_cache.hpp

struct RankRuntime {
  int rank = 0;        // global rank in the job
  int world_size = 1;
  int local_rank = 0;  // GPU index on this node
  int local_world_size = 1;  // ranks on this node (LOCAL_WORLD_SIZE): decides NCCL vs Gloo
  c10::intrusive_ptr<c10d::Store> store;
  // The CPBENCH_FAULT=slow test hook: case slow_case's timed steps on rank slow_rank are lengthened
  // by slow_fraction of themselves (-1: no case).
  int64_t slow_case = -1;
  int slow_rank = -1;
  double slow_fraction = 0;
  // The CPBENCH_FAULT=slowref test hook: on case slowref_case, rank slowref_rank (a cp-rank 0) sleeps
  // slowref_s after its references, before the others may start the step (-1: no case).
  int64_t slowref_case = -1;
  int slowref_rank = -1;
  double slowref_s = 0;
  bool slow_spins = false;  // CPBENCH_FAULT=work: the lengthening is CPU work, not a sleep
  // The cores this rank's timed steps run on (CPBENCH_RANK_CPUS from cpbench's own launcher; empty:
  // unbound, as under torchrun or SLURM). See harness/launcher/core_binding.hpp.
  std::vector<int> timed_cpus;
  // The single-rank references this rank process keeps across its cases (reference_cache.hpp); null:
  // every case computes its own.
  std::shared_ptr<ReferenceCache> references;
};

struct CaseContext {
  const ScenarioSpec& s;
  const CaseSpec& c;
  int cp_rank = 0, dp_index = 0;
  at::Device device = at::kCPU;
  bool cuda = false;
  bool shared_gpu = false;
  std::optional<comm::ProcessGroup> cp_pg, world_pg;
  comm::Communicator comm;  // the CP group
  GlobalData data;
  TinyTransformer model{nullptr};
  std::shared_ptr<const Layout> layout;
  AttentionRouting routing = AttentionRouting::transport;
  const Control* control = nullptr;  // the case's negative control, or null
  // The transport the model's attention calls: the case's, wrapped by the control on the ranks it
  // breaks.
  std::shared_ptr<const Transport> transport;
  // The sliding_attention layers' (CaseSpec::transport_of_sliding, wrapped the same way); null when the
  // model has none.
  std::shared_ptr<const Transport> sliding_transport;
  double scale = 0;  // softmax scale 1/sqrt(head_dim)
  std::string nvtx;  // "cp:<sharder>"
  std::vector<std::pair<std::string, at::Tensor>> params;

  CaseContext(const ScenarioSpec& spec, const CaseSpec& cs) : s(spec), c(cs) {}
  // Phase boundaries on a GPU: synchronize, then read the host clock, so a phase's time covers its
  // kernels (an NVTX range marks the same span for Nsight).
  void sync() const;
};

// Device, backend and process groups (the CP group of this rank's data-parallel replica, and the world
// when dp > 1), then data, model, layout and transport.
void setup_case(CaseContext& x, RankRuntime& rt);

// The case's negative control (a registered control name on the sharder axis), or null.
[[nodiscard]] const Control* case_control(const CaseSpec& c);

}  // namespace cpbench
