#include "harness/runner/case_context.hpp"

#include <c10/cuda/CUDAFunctions.h>
#include <torch/cuda.h>

#include <cmath>

#include "harness/runner/device_choice.hpp"
#include "sharders/core/nvtx.hpp"

namespace cpbench {

void CaseContext::sync() const {
  if (cuda) torch::cuda::synchronize(device.index());
}

const Control* case_control(const CaseSpec& c) { return find_control(c.sharder); }

void setup_case(CaseContext& x, RankRuntime& rt) {
  const CaseSpec& c = x.c;
  const int cp = static_cast<int>(c.cp);
  x.dp_index = rt.rank / cp;
  x.cp_rank = rt.rank % cp;
  x.cuda = x.s.device == DeviceKind::cuda;
  const DeviceChoice dc = choose_device(x.cuda, rt.local_rank, rt.local_world_size,
                                        x.cuda ? static_cast<int>(torch::cuda::device_count()) : 0, x.s.share_gpu);
  const comm::BackendKind kind = dc.backend;
  x.shared_gpu = dc.shared_gpu;
  std::optional<at::Device> bound;
  if (x.cuda) {
    x.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(dc.device_index));
    c10::cuda::set_device(x.device.index());
    use_full_precision_gemm_reductions();
    if (kind == comm::BackendKind::nccl) bound = x.device;
  }
  const auto timeout = std::chrono::milliseconds(x.s.timeout_s * 1000);
  std::vector<int> cp_ranks;
  for (int i = 0; i < cp; ++i) cp_ranks.push_back(x.dp_index * cp + i);
  const std::string tag = "case" + std::to_string(c.index);
  x.cp_pg.emplace(comm::ProcessGroup::create(rt.store, tag + "/cp" + std::to_string(x.dp_index), cp_ranks, rt.rank,
                                             kind, timeout, 1, bound));
  x.comm = comm::Communicator(x.cp_pg->backend_ptr());
  if (c.dp > 1) {
    std::vector<int> all(rt.world_size);
    for (int i = 0; i < rt.world_size; ++i) all[i] = i;
    x.world_pg.emplace(comm::ProcessGroup::create(rt.store, tag + "/world", all, rt.rank, kind, timeout, 1, bound));
  }
  x.data = make_global_data(x.s.batch, x.s.model, c.dtype, x.device, static_cast<uint64_t>(x.dp_index));
  x.model = TinyTransformer(x.s.model, c.dtype, x.device);
  x.control = case_control(c);
  const std::string layout_name = x.control ? x.control->layout() : c.sharder;
  x.layout = make_layout(layout_name);
  x.routing = attention_routing(layout_name);
  x.transport = make_transport(c.transport, c.transport_options());
  if (x.control) x.transport = x.control->wrap(x.transport, ControlSite{x.cp_rank, c.cp, c.dtype});
  if (x.s.model.attention.has_sliding()) {
    x.sliding_transport = c.sliding_transport.empty() ? make_transport(c.transport, c.transport_options())
                                                      : make_transport(c.sliding_transport);
    if (x.control) x.sliding_transport = x.control->wrap(x.sliding_transport, ControlSite{x.cp_rank, c.cp, c.dtype});
  }
  x.scale = 1.0 / std::sqrt(static_cast<double>(x.s.model.head_dim()));
  x.nvtx = nvtx::prefix(c.sharder);
  for (const auto& p : x.model->named_parameters()) x.params.emplace_back(p.key(), p.value());
}

}  // namespace cpbench
