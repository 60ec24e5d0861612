// GPU tests (CTest label `gpu`): they skip themselves, with the reason, where no CUDA GPU is present.
// scripts/gpu-check.sh runs them on a GPU machine.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/comm/communicator.hpp"
#include "kernels/comm/device_time.hpp"
#include "kernels/comm/process_group.hpp"
#include "harness/fs_util.hpp"
#include "kernels/attention/reference.hpp"
#include "kernels/attention/fused_attention.hpp"
#include <c10/cuda/CUDAFunctions.h>
#include "kernels/transports/transport.hpp"
#include "kernels/transports/transport_common.hpp"
#include "reports/json_report.hpp"
#include "tests/gpu/gpu_cases.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...

using namespace cpbench;

#define REQUIRE_CUDA()                                                                      \
  do {                                                                                      \
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU on this machine (torch::cuda::is_available() is false)"; \
  } while (0)

namespace {
TokenMeta causal_meta(int64_t B, int64_t S, const at::Device& d) {
  auto o = at::TensorOptions().dtype(at::kLong).device(d);
  return TokenMeta{at::arange(S, o).unsqueeze(0).expand({B, S}).contiguous(), at::zeros({B, S}, o), at::zeros({B, S}, o),
                   at::ones({B, S}, o.dtype(at::kBool))};
}
}  // namespace

// Both transports at W = 1 on the GPU, forward and backward, against the float64 CPU reference.
TEST(Gpu, TransportsMatchTheCpuReference) {
  const at::Device cuda(at::kCUDA, 0);
  const int64_t B = 2, Hq = 4, Hkv = 2, S = 256, D = 32;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  at::Tensor q = at::normal(0, 1, {B, Hq, S, D}, gen, at::kDouble), k = at::normal(0, 1, {B, Hkv, S, D}, gen, at::kDouble),
             v = at::normal(0, 1, {B, Hkv, S, D}, gen, at::kDouble), g = at::normal(0, 1, {B, Hq, S, D}, gen, at::kDouble);
  const MaskSpec mask = MaskSpec::parse("causal");
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto ref_in = std::vector<at::Tensor>{q.clone().requires_grad_(), k.clone().requires_grad_(), v.clone().requires_grad_()};
  TokenMeta cpu_meta = causal_meta(B, S, at::kCPU);
  at::Tensor ref = local_attention(ref_in[0], ref_in[1], ref_in[2], cpu_meta, cpu_meta, mask, scale);
  ref.backward(g);
  REQUIRE_CUDA();  // the CPU reference above runs everywhere
  comm::Communicator world_of_one;
  for (const std::string name : {"allgather", "ring"}) {
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
      auto in = std::vector<at::Tensor>{q.to(cuda, dtype).requires_grad_(), k.to(cuda, dtype).requires_grad_(),
                                        v.to(cuda, dtype).requires_grad_()};
      TokenMeta meta = causal_meta(B, S, cuda);
      AttentionContext ctx{&world_of_one, mask, meta, meta, scale, nullptr, "cp:gpu-test", nullptr, false};
      at::Tensor out = make_transport(name)->attend(in[0], in[1], in[2], ctx);
      out.backward(g.to(cuda, dtype));
      const double tol = dtype == at::kFloat ? 1e-4 : 3e-2;
      auto rel = [](const at::Tensor& a, const at::Tensor& b) {
        return ((a.to(at::kCPU, at::kDouble) - b).abs().max() / b.abs().max()).item<double>();
      };
      EXPECT_LT(rel(out, ref.detach()), tol) << name << " " << dtype;
      EXPECT_LT(rel(in[0].grad(), ref_in[0].grad()), tol) << name << " dq " << dtype;
      EXPECT_LT(rel(in[1].grad(), ref_in[1].grad()), tol) << name << " dk " << dtype;
      EXPECT_LT(rel(in[2].grad(), ref_in[2].grad()), tol) << name << " dv " << dtype;
    }
  }
}

// An NCCL process group of one rank (one GPU cannot host several NCCL ranks).
// Its group's arguments come from gpu_cases (checked on the CPU by GpuCases.NcclWorldOfOneIsAGroupNcclAccepts).
TEST(Gpu, NcclWorldOfOneCollectives) {
  const comm::GroupSpec spec = gpu_cases::nccl_world_of_one(0);
  ASSERT_EQ(comm::group_spec_error(spec), "");
  REQUIRE_CUDA();
  comm::RendezvousOptions ro;
  ro.master_port = 0;
  ro.world_size = 1;
  auto store = comm::connect_store(ro);
  auto pg = comm::ProcessGroup::create(store, spec);
  comm::Communicator c(pg.backend_ptr());
  at::Tensor x = at::arange(6, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA)).view({3, 2});
  EXPECT_TRUE(at::equal(c.all_gather(x).cpu(), x.cpu()));
  at::Tensor y = x.clone();
  c.all_reduce_sum(y);
  EXPECT_TRUE(at::equal(y.cpu(), x.cpu()));
  EXPECT_TRUE(at::equal(c.reduce_scatter_sum(x).cpu(), x.cpu()));
}

// The runner end to end with device: cuda: W = 1 over NCCL, W = 2 over NCCL with two or more GPUs,
// else sharing the GPU over Gloo (gpu_cases::expected_runner_backend, held against choose_device on
// the CPU by GpuCases.RunnerBackendExpectationIsTheDeviceChoice).
TEST(Gpu, RunnerPassesTheGradientCheckOnCuda) {
  const std::string dir = "/tmp/cpbench-gpu-test-" + std::to_string(::getpid());
  fsu::remove_tree(dir);
  fsu::make_dirs(dir);
  std::ofstream(dir + "/gpu.yaml") << gpu_cases::runner_scenario_yaml();
  REQUIRE_CUDA();
  const int visible = static_cast<int>(torch::cuda::device_count());
  const int st = std::system((std::string(CPBENCH_EXE) + " run " + dir + "/gpu.yaml --out " + dir + "/out").c_str());
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  Report r = report_from_json(read_json_file(dir + "/out/report.json"));
  for (const auto& c : r.results) {
    EXPECT_EQ(c.status, "ok") << c.name << ": " << c.reason;
    EXPECT_EQ(c.axes.at("backend"), comm::to_string(gpu_cases::expected_runner_backend(std::stoi(c.axes.at("cp")), visible)))
        << c.name;
    // The step timeline on a GPU: phase bounds after a device synchronize (docs/timeline.md).
    EXPECT_EQ(c.timeline.clock, "steady+cuda_events") << c.name;
    EXPECT_EQ(c.timeline.ranks.size(), static_cast<size_t>(std::stoi(c.axes.at("cp")))) << c.name;
  }
  EXPECT_TRUE(fsu::exists(dir + "/out/trace.json"));
}

// Every CUDA route (flash for unmasked 16-bit blocks, memory-efficient with a bias for masked and
// float32 ones) against the tiled kernel on the same GPU, forward and backward.
TEST(Gpu, FusedRoutesMatchTheTiledKernel) {
  const at::Device cuda(at::kCUDA, 0);
  const MaskSpec causal = MaskSpec::parse("causal");
  const int64_t B = 2, S = 256, D = 64;
  auto row = [&](const at::Tensor& pos) {
    at::Tensor p = pos.to(at::kLong).unsqueeze(0).repeat({B, 1}).contiguous();
    return TokenMeta{p, at::zeros_like(p), at::zeros_like(p), at::ones_like(p, at::kBool)};
  };
  const at::Tensor ar = at::arange(S);
  struct Blk { const char* name; kernels::BlockPlan plan; };
  std::vector<Blk> blocks;
  blocks.push_back({"diagonal causal", make_plan_cache(causal, row(ar), row(ar), 0, 1, cuda)->plan(0)});
  blocks.push_back({"full", kernels::plan_block(MaskSpec::parse("full"), row(ar), row(ar))});
  blocks.push_back({"striped (mask, a row sees nothing)", kernels::plan_block(causal, row(ar * 2), row(ar * 2 + 1))});
  for (const auto& b : blocks) ASSERT_NE(b.plan.kind, kernels::BlockKind::empty) << b.name;
  REQUIRE_CUDA();  // the plans above are host work
  for (auto& b : blocks) {
    if (b.plan.mask.defined()) b.plan.mask = b.plan.mask.to(cuda);
    if (b.plan.cell_masks.defined()) b.plan.cell_masks = b.plan.cell_masks.to(cuda);
  }
  for (auto dt : {at::kBFloat16, at::kFloat}) {
    for (const auto& b : blocks) {
      at::manual_seed(3);
      const auto o = at::TensorOptions().dtype(dt).device(cuda);
      const at::Tensor q = at::randn({B, 8, S, D}, o), k = at::randn({B, 2, S, D}, o), v = at::randn({B, 2, S, D}, o),
                       dout = at::randn({B, 8, S, D}, o);
      const auto route = kernels::block_route(b.plan, dt, cuda, D, kernels::KernelPolicy::fused);
      ASSERT_NE(route, kernels::KernelRoute::tiled) << b.name;
      const auto f32 = [](const at::Tensor& t) { return t.to(at::kFloat); };
      const auto want = kernels::block_forward(f32(q), f32(k), f32(v), b.plan, 0.125);
      const auto got = kernels::routed_forward(q, k, v, b.plan, 0.125, route);
      const double tol = dt == at::kFloat ? 2e-4 : 3e-2;
      const auto rel = [](const at::Tensor& a, const at::Tensor& w) {
        const at::Tensor fin = at::isfinite(w);
        return ((a.masked_fill(~fin, 0) - w.masked_fill(~fin, 0)).abs().max() / w.masked_fill(~fin, 0).abs().max().clamp_min(1))
            .item<double>();
      };
      EXPECT_LT(rel(got.out, want.out), tol) << b.name << " " << dt << " " << kernels::to_string(route);
      EXPECT_LT(rel(got.lse, want.lse), tol) << b.name << " " << dt;
      EXPECT_TRUE(at::isinf(got.lse).equal(at::isinf(want.lse))) << b.name << " " << dt;
      const at::Tensor dsum = (f32(dout) * want.out).sum(-1);
      const auto gw = kernels::block_backward(f32(dout), f32(q), f32(k), f32(v), want.lse, dsum, b.plan, 0.125);
      const auto gg = kernels::routed_backward(dout, q, k, v, want.out, want.lse, dsum, b.plan, 0.125, route);
      EXPECT_LT(rel(gg.dq, gw.dq), tol) << b.name << " dq " << dt;
      EXPECT_LT(rel(gg.dk, gw.dk), tol) << b.name << " dk " << dt;
      EXPECT_LT(rel(gg.dv, gw.dv), tol) << b.name << " dv " << dt;
    }
  }
}

// The flash window and varlen routes (window_size_left / right; cum_seq_q / k) against the tiled
// kernel on the same GPU, forward and backward, bf16, GQA: a shifted-causal block, a sliding window
// longer than a chunk, three documents. The blocks, their flash arguments and routes are
// gpu_cases::flash_route_blocks, which FlashArgs.GpuTestBlocksTakeTheFlashRoutes runs on the CPU.
TEST(Gpu, FlashWindowAndVarlenRoutesMatchTheTiledKernel) {
  const int64_t D = 64;
  const auto blocks = gpu_cases::flash_route_blocks(D);
  for (const auto& b : blocks) ASSERT_EQ(b.route, b.expected) << b.name;
  REQUIRE_CUDA();  // the plans, arguments and routes above are host work
  const at::Device cuda(at::kCUDA, 0);
  for (const auto& blk : blocks) {
    kernels::BlockPlan plan = gpu_cases::plan_on(blk.plan, cuda);
    kernels::attach_band_masks(plan, blk.batch, cuda);
    at::manual_seed(3);
    const auto o = at::TensorOptions().dtype(at::kBFloat16).device(cuda);
    const at::Tensor q = at::randn({blk.batch, 8, blk.sq, D}, o), k = at::randn({blk.batch, 2, blk.sk, D}, o),
                     v = at::randn({blk.batch, 2, blk.sk, D}, o), dout = at::randn({blk.batch, 8, blk.sq, D}, o);
    const auto f32 = [](const at::Tensor& t) { return t.to(at::kFloat); };
    const auto want = kernels::block_forward(f32(q), f32(k), f32(v), plan, 0.125);
    const auto got = kernels::routed_forward(q, k, v, plan, 0.125, blk.route);
    const auto rel = [](const at::Tensor& a, const at::Tensor& w) {
      const at::Tensor fin = at::isfinite(w);
      return ((a.masked_fill(~fin, 0) - w.masked_fill(~fin, 0)).abs().max() / w.masked_fill(~fin, 0).abs().max().clamp_min(1))
          .item<double>();
    };
    const double tol = 3e-2;
    const std::string what = blk.name + " " + kernels::to_string(blk.route);
    EXPECT_LT(rel(got.out, want.out), tol) << what;
    EXPECT_LT(rel(got.lse, want.lse), tol) << what;
    EXPECT_TRUE(at::isinf(got.lse).equal(at::isinf(want.lse))) << what << ": rows that see nothing differ";
    const at::Tensor dsum = (f32(dout) * want.out).sum(-1);
    const auto gw = kernels::block_backward(f32(dout), f32(q), f32(k), f32(v), want.lse, dsum, plan, 0.125);
    const auto gg = kernels::routed_backward(dout, q, k, v, want.out, want.lse, dsum, plan, 0.125, blk.route);
    EXPECT_LT(rel(gg.dq, gw.dq), tol) << what << " dq";
    EXPECT_LT(rel(gg.dk, gw.dk), tol) << what << " dk";
    EXPECT_LT(rel(gg.dv, gw.dv), tol) << what << " dv";
  }
}

// A 16-bit head dim that is no multiple of 8 (12) on every CUDA fused route: q, k, v zero-padded to 16
// and the results sliced back (fused_head_dim), the scale 1/sqrt(12); against the tiled kernel, forward
// and backward, bf16 and fp16, GQA. The memory-efficient kernel rejects the unpadded call ("query is
// not correctly aligned (strideM)"). The routes are the CPU-proven ones (FusedTransport.CudaRouteRule,
// FlashArgs.GpuTestBlocksTakeTheFlashRoutes); the padding's maths FusedBlock.PaddedHeadDim... proves.
TEST(Gpu, HeadDimNotAMultipleOf8RunsPadded) {
  const int64_t D = 12;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  auto blocks = gpu_cases::flash_route_blocks(D);
  const MaskSpec causal = MaskSpec::parse("causal");
  const TokenMeta diag_meta = causal_meta(1, 256, at::kCPU);
  gpu_cases::FlashRouteBlock diag{"diagonal causal", make_plan_cache(causal, diag_meta, diag_meta, 0, 1, at::kCPU)->plan(0),
                                  kernels::KernelRoute::skipped, kernels::KernelRoute::cuda_flash, 1, 256, 256};
  const auto pos = at::arange(256, at::kLong).unsqueeze(0);
  const TokenMeta even{pos * 2, at::zeros_like(pos), at::zeros_like(pos), at::ones_like(pos, at::kBool)};
  const TokenMeta odd{pos * 2 + 1, at::zeros_like(pos), at::zeros_like(pos), at::ones_like(pos, at::kBool)};
  gpu_cases::FlashRouteBlock striped{"striped (bias, a row sees nothing)", kernels::plan_block(causal, even, odd),
                                     kernels::KernelRoute::skipped, kernels::KernelRoute::cuda_efficient, 1, 256, 256};
  blocks.push_back(std::move(diag));
  blocks.push_back(std::move(striped));
  for (auto& b : blocks) {
    b.route = kernels::block_route(b.plan, at::kBFloat16, at::Device(at::kCUDA, 0), D, kernels::KernelPolicy::fused, 8, 2);
    ASSERT_EQ(b.route, b.expected) << b.name;
  }
  REQUIRE_CUDA();  // the plans and routes above are host work
  const at::Device cuda(at::kCUDA, 0);
  for (const auto dt : {at::kBFloat16, at::kHalf}) {
    for (const auto& blk : blocks) {
      kernels::BlockPlan plan = gpu_cases::plan_on(blk.plan, cuda);
      kernels::attach_band_masks(plan, blk.batch, cuda);
      at::manual_seed(3);
      const auto o = at::TensorOptions().dtype(dt).device(cuda);
      const at::Tensor q = at::randn({blk.batch, 8, blk.sq, D}, o), k = at::randn({blk.batch, 2, blk.sk, D}, o),
                       v = at::randn({blk.batch, 2, blk.sk, D}, o), dout = at::randn({blk.batch, 8, blk.sq, D}, o);
      const auto f32 = [](const at::Tensor& t) { return t.to(at::kFloat); };
      const auto want = kernels::block_forward(f32(q), f32(k), f32(v), plan, scale);
      const auto got = kernels::routed_forward(q, k, v, plan, scale, blk.route);
      const auto rel = [](const at::Tensor& a, const at::Tensor& w) {
        const at::Tensor fin = at::isfinite(w);
        return ((a.masked_fill(~fin, 0) - w.masked_fill(~fin, 0)).abs().max() / w.masked_fill(~fin, 0).abs().max().clamp_min(1))
            .item<double>();
      };
      const double tol = 3e-2;
      const std::string what = blk.name + " " + kernels::to_string(blk.route) + " " + c10::toString(dt);
      ASSERT_EQ(got.out.sizes(), want.out.sizes()) << what;
      EXPECT_LT(rel(got.out, want.out), tol) << what;
      EXPECT_LT(rel(got.lse, want.lse), tol) << what;
      const at::Tensor dsum = (f32(dout) * want.out).sum(-1);
      const auto gw = kernels::block_backward(f32(dout), f32(q), f32(k), f32(v), want.lse, dsum, plan, scale);
      const auto gg = kernels::routed_backward(dout, q, k, v, want.out, want.lse, dsum, plan, scale, blk.route);
      EXPECT_LT(rel(gg.dq, gw.dq), tol) << what << " dq";
      EXPECT_LT(rel(gg.dk, gw.dk), tol) << what << " dk";
      EXPECT_LT(rel(gg.dv, gw.dv), tol) << what << " dv";
    }
  }
}

// A step's attention (3 layers, forward and backward) with the step's plans built beforehand runs
// without one host synchronization: CUDA's sync-debug mode set to error throws on any. Causal (no
// mask), documents and a sliding window (masked bands: their masks travel with the plans), over
// allgather, ring and a2a (its all-to-alls timed with events, its reorder on the device). The Mamba
// layer is not covered here (its per-layer index tensors: branch ssm).
TEST(Gpu, AttentionStepHasNoHostSynchronization) {
  const int64_t S = 1024;
  TokenMeta docs = causal_meta(1, S, at::kCPU);
  docs.doc = at::floor_divide(docs.pos, 300);
  struct Case {
    const char* mask;
    TokenMeta meta;
  };
  const std::vector<Case> cases = {{"causal", causal_meta(1, S, at::kCPU)}, {"document", docs},
                                   {"sliding_window:200", causal_meta(1, S, at::kCPU)}};
  REQUIRE_CUDA();
  const at::Device cuda(at::kCUDA, 0);
  comm::Communicator one;
  for (const Case& c : cases) {
    const MaskSpec mask = MaskSpec::parse(c.mask);
    for (const std::string name : {"allgather", "ring", "a2a"}) {
      // With stats that record spans: the transports time them with CUDA events, which must not
      // synchronize either.
      AttentionStats stats;
      stats.record_spans = true;
      AttentionContext ctx{&one, mask, c.meta, c.meta, 0, &stats, "cp:gpu-test", nullptr, false};
      ctx.plans = make_transport(name)->make_plans(mask, c.meta, c.meta, {}, 0, 1, cuda);
      const auto o = at::TensorOptions().dtype(at::kBFloat16).device(cuda);
      at::Tensor x = at::randn({1, 8, S, 64}, o).requires_grad_();
      torch::cuda::synchronize();
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
      try {
        at::Tensor h = x;
        for (int layer = 0; layer < 3; ++layer)
          h = make_transport(name)->attend(h, h.narrow(1, 0, 2), h.narrow(1, 0, 2), ctx);
        h.to(at::kFloat).sum().backward();
      } catch (const std::exception& e) {
        c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
        FAIL() << name << " " << c.mask << ": a host synchronization inside the step: " << e.what();
      }
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
      // The spans resolve after the step: device time spent on the blocks, on the host clock.
      const auto anchor_host = std::chrono::steady_clock::now();
      EXPECT_FALSE(stats.device_spans.empty()) << name << " " << c.mask;
      resolve_device_times(stats, comm::DeviceTime{}, anchor_host);
      EXPECT_GT(stats.compute_seconds, 0.0) << name << " " << c.mask;
      EXPECT_TRUE(stats.device_spans.empty()) << name << " " << c.mask;
    }
  }
}

// DeviceTime on CUDA: taking a time records an event without synchronizing the host, and the span
// between two covers the kernels launched in between.
TEST(Gpu, DeviceTimeRecordsEventsWithoutSynchronizing) {
  REQUIRE_CUDA();
  const at::Device cuda(at::kCUDA, 0);
  const at::Tensor a = at::randn({4096, 4096}, at::TensorOptions().device(cuda));
  torch::cuda::synchronize();
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
  comm::DeviceTime t0, t1;
  try {
    t0 = comm::DeviceTime::now(cuda);
    at::Tensor c = a;
    for (int i = 0; i < 8; ++i) c = at::mm(c, a);
    t1 = comm::DeviceTime::now(cuda);
  } catch (const std::exception& e) {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    FAIL() << "DeviceTime::now synchronized the host: " << e.what();
  }
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  EXPECT_TRUE(t0.on_cuda());
  EXPECT_GT(comm::DeviceTime::between(t0, t1), 0.0);
}
