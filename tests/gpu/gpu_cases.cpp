#include "tests/gpu/gpu_cases.hpp"

#include <chrono>

#include "harness/model/data.hpp"
#include "kernels/attention/plan_cache.hpp"
#include "kernels/transports/transport.hpp"
#include "sharders/registry.hpp"
#include "sharders/sharder.hpp"

namespace cpbench::gpu_cases {

comm::GroupSpec nccl_world_of_one(int device_index) {
  comm::GroupSpec s;
  s.name = "nccl-test";
  s.ranks = {0};
  s.global_rank = 0;
  s.kind = comm::BackendKind::nccl;
  s.timeout = std::chrono::seconds(60);
  s.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device_index));
  return s;
}

std::string runner_scenario_yaml() {
  return R"(name: gpu-check
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 512, documents: [300, 212]}
dtype: float32
device: cuda
share_gpu: true
measure: {max_time_s: 0, collectives: false}
sweep: {sharder: [load_balanced, thd], transport: [allgather, ring], cp: [1, 2], mask: [causal, document]}
)";
}

comm::BackendKind expected_runner_backend(int64_t cp, int visible_gpus) {
  return cp <= visible_gpus ? comm::BackendKind::nccl : comm::BackendKind::gloo;
}

std::vector<TokenMeta> rank_metas(const std::string& layout, int64_t W, int64_t S,
                                  const std::vector<int64_t>& documents, const MaskSpec& mask) {
  BatchSpec spec;
  spec.batch_size = 1;
  spec.seq_len = S;
  if (!documents.empty()) spec.documents = {documents};
  const GlobalData data = make_global_data(spec, ModelConfig::preset_named("tiny"), at::kFloat, at::Device(at::kCPU));
  std::vector<TokenMeta> ranks;
  for (int64_t r = 0; r < W; ++r) {
    Sharder sh(make_layout(layout), SharderOptions{W, r, spec.padding_token_id, mask, 0});
    ranks.push_back(sh.attention_meta(sh.shard(data.batch)));
  }
  const auto cat = [&](at::Tensor TokenMeta::*field) {
    std::vector<at::Tensor> parts;
    for (const auto& m : ranks) parts.push_back(m.*field);
    return parts.front().defined() ? at::cat(parts, 1) : at::Tensor();
  };
  ranks.push_back(TokenMeta{cat(&TokenMeta::pos), cat(&TokenMeta::segment), cat(&TokenMeta::doc), cat(&TokenMeta::valid)});
  return ranks;
}

std::vector<FlashRouteBlock> flash_route_blocks(int64_t head_dim) {
  using kernels::KernelRoute;
  struct Spec {
    const char* name;
    const char* layout;
    const char* mask;
    int64_t W, S;
    std::vector<int64_t> docs;
    int rank, src;
    KernelRoute expected;
  };
  const std::vector<Spec> specs = {
      {"shifted causal (striped, rank 0 against rank 1)", "striped", "causal", 2, 512, {}, 0, 1,
       KernelRoute::cuda_flash_window},
      {"sliding window 300 > chunk 256 (contiguous, rank 1 against rank 0)", "contiguous", "sliding_window:300", 2, 512,
       {}, 1, 0, KernelRoute::cuda_flash_window},
      {"documents 150 / 230 / 132 (contiguous, W = 1)", "contiguous", "document", 1, 512, {150, 230, 132}, 0, 0,
       KernelRoute::cuda_flash_varlen},
  };
  std::vector<FlashRouteBlock> out;
  const auto allgather = make_transport("allgather");
  for (const Spec& s : specs) {
    const MaskSpec mask = MaskSpec::parse(s.mask);
    const auto metas = rank_metas(s.layout, s.W, s.S, s.docs, mask);
    const TokenMeta& local = metas[static_cast<size_t>(s.rank)];
    const auto cache = allgather->make_plans(mask, local, metas.back(), {}, s.rank, static_cast<int>(s.W), at::kCPU);
    FlashRouteBlock b;
    b.name = s.name;
    b.plan = cache->plan(s.src);
    kernels::attach_flash_args(b.plan, local.batch(), at::kCPU);
    b.route = kernels::block_route(b.plan, at::kBFloat16, at::Device(at::kCUDA, 0), head_dim, kernels::KernelPolicy::fused);
    b.expected = s.expected;
    b.batch = local.batch();
    b.sq = local.tokens();
    b.sk = metas[static_cast<size_t>(s.src)].tokens();
    out.push_back(std::move(b));
  }
  return out;
}

kernels::BlockPlan plan_on(const kernels::BlockPlan& plan, const at::Device& device) {
  kernels::BlockPlan p = plan;
  const auto to = [&](at::Tensor& t) {
    if (t.defined()) t = t.to(device);
  };
  to(p.rows);
  to(p.cols);
  to(p.mask);
  to(p.cell_masks);
  for (auto& band : p.bands) {
    to(band.mask);
    to(band.empty_rows);
    band.bias = at::Tensor();
  }
  if (p.varlen) {
    to(p.varlen->cu_seqlens_q);
    to(p.varlen->cu_seqlens_k);
    to(p.varlen->empty_rows);
  }
  return p;
}

std::vector<RouteCounts> case_routes(const ScenarioSpec& s, const CaseSpec& c, const at::Device& device) {
  const at::ScalarType kdt = kernels::kernel_dtype(c.dtype, device, kernels::KernelPolicy::fused);
  const GlobalData data = make_global_data(s.batch, s.model, c.dtype, at::Device(at::kCPU));
  const auto transport = make_transport(c.transport, c.transport_options());
  std::vector<TokenMeta> metas;
  std::vector<int64_t> rank_order;
  for (int64_t r = 0; r < c.cp; ++r) {
    Sharder sh(make_layout(c.sharder), SharderOptions{c.cp, r, s.batch.padding_token_id, c.mask, 0});
    metas.push_back(sh.attention_meta(sh.shard(data.batch)));
    if (r == 0)
      for (const auto& ranks : sh.shard_layout().global.ranks) rank_order.insert(rank_order.end(), ranks.begin(), ranks.end());
  }
  const auto cat = [&](at::Tensor TokenMeta::*field) {
    std::vector<at::Tensor> parts;
    for (const auto& m : metas) parts.push_back(m.*field);
    return parts.front().defined() ? at::cat(parts, 1) : at::Tensor();
  };
  const TokenMeta all{cat(&TokenMeta::pos), cat(&TokenMeta::segment), cat(&TokenMeta::doc), cat(&TokenMeta::valid)};
  const at::Tensor global_index = at::tensor(rank_order, at::kLong);
  std::vector<RouteCounts> routes(static_cast<size_t>(c.cp));
  for (int64_t r = 0; r < c.cp; ++r) {
    const TokenMeta& local = metas[static_cast<size_t>(r)];
    const auto cache = transport->make_plans(c.mask, local, all, global_index, static_cast<int>(r),
                                             static_cast<int>(c.cp), at::kCPU);
    for (int src = 0; src < cache->world(); ++src) {
      kernels::BlockPlan p = cache->plan(src);
      if (device.is_cuda()) kernels::attach_flash_args(p, cache->batch(), at::kCPU);
      // The model's heads: a head-parallel call has fewer of each, GQA where the model has it.
      const auto route = kernels::block_route(p, kdt, device, s.model.head_dim(), kernels::KernelPolicy::fused,
                                              s.model.heads, s.model.kv_heads);
      routes[static_cast<size_t>(r)][kernels::to_string(route)] += 1;
    }
  }
  return routes;
}

RouteCounts total_routes(const std::vector<RouteCounts>& per_rank) {
  RouteCounts total;
  for (const auto& rank : per_rank)
    for (const auto& [route, n] : rank) total[route] += n;
  return total;
}

}  // namespace cpbench::gpu_cases
