// GPU tests (CTest label `gpu`): they skip themselves, with the reason, where no CUDA GPU is present.
// scripts/gpu-check.sh runs them on a GPU machine.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/comm/communicator.hpp"
#include "kernels/comm/process_group.hpp"
#include "harness/fs_util.hpp"
#include "kernels/attention/reference.hpp"
#include "kernels/transports/transport.hpp"
#include "reports/json_report.hpp"

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
  REQUIRE_CUDA();
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
  comm::Communicator world_of_one;
  for (const std::string name : {"allgather", "ring"}) {
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
      auto in = std::vector<at::Tensor>{q.to(cuda, dtype).requires_grad_(), k.to(cuda, dtype).requires_grad_(),
                                        v.to(cuda, dtype).requires_grad_()};
      TokenMeta meta = causal_meta(B, S, cuda);
      AttentionContext ctx{&world_of_one, mask, meta, meta, scale, nullptr, "cp:gpu-test"};
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
TEST(Gpu, NcclWorldOfOneCollectives) {
  REQUIRE_CUDA();
  comm::RendezvousOptions ro;
  ro.master_port = 0;
  ro.world_size = 1;
  auto store = comm::connect_store(ro);
  auto pg = comm::ProcessGroup::create(store, "nccl-test", {0}, 0, comm::BackendKind::nccl, std::chrono::seconds(60));
  comm::Communicator c(pg.backend_ptr());
  at::Tensor x = at::arange(6, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA)).view({3, 2});
  EXPECT_TRUE(at::equal(c.all_gather(x).cpu(), x.cpu()));
  at::Tensor y = x.clone();
  c.all_reduce_sum(y);
  EXPECT_TRUE(at::equal(y.cpu(), x.cpu()));
  EXPECT_TRUE(at::equal(c.reduce_scatter_sum(x).cpu(), x.cpu()));
}

// The runner end to end with device: cuda: W = 1 over NCCL, W = 2 sharing the GPU over Gloo.
TEST(Gpu, RunnerPassesTheGradientCheckOnCuda) {
  REQUIRE_CUDA();
  const std::string dir = "/tmp/cpbench-gpu-test-" + std::to_string(::getpid());
  fsu::remove_tree(dir);
  fsu::make_dirs(dir);
  std::ofstream(dir + "/gpu.yaml") << R"(name: gpu-check
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 512, documents: [300, 212]}
dtype: float32
device: cuda
sweep: {sharder: [load_balanced, thd], transport: [allgather, ring], cp: [1, 2], mask: [causal, document]}
)";
  const int st = std::system((std::string(CPBENCH_EXE) + " run " + dir + "/gpu.yaml --out " + dir + "/out").c_str());
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  Report r = report_from_json(read_json_file(dir + "/out/report.json"));
  for (const auto& c : r.results) {
    EXPECT_EQ(c.status, "ok") << c.name << ": " << c.reason;
    EXPECT_EQ(c.axes.at("backend"), c.axes.at("cp") == "1" ? "nccl" : "gloo") << c.name;
  }
}
