// device: cuda admission (harness/runner/admission.hpp admit_device), a plain function of the GPUs'
// free memory, proven here without one: the same memory terms as the CPU's against each GPU's free
// memory, the reference counted on cp-rank 0's GPU, ranks sharing a GPU summed, refused with one line
// that names the case, the GPU, both figures and what fits; and the `_device_memory` child's format.
#include <gtest/gtest.h>

#include <torch/cuda.h>

#include <string>

#include "harness/runner/admission.hpp"
#include "harness/runner/device_memory.hpp"
#include "sharders/core/check.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_SOURCE_DIR

using namespace cpbench;

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

ScenarioSpec cuda_scenario(const std::string& batch, const std::string& sweep, const std::string& extra = "") {
  return parse_scenario("name: t\ndevice: cuda\n" + extra + "model: {preset: tiny}\nbatch: " + batch + "\nsweep: " + sweep +
                            "\n",
                        "t.yaml");
}

std::vector<GpuMemory> gpus(int n, double free_gib, double total_gib = 141) {
  return std::vector<GpuMemory>(static_cast<size_t>(n), GpuMemory{"NVIDIA H200", free_gib * kGiB, total_gib * kGiB});
}

std::string refusal(const ScenarioSpec& s, const std::vector<GpuMemory>& g, int64_t local = 0, int64_t world = 0) {
  try {
    admit_device(s, s.cases, g, local, world);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST(CudaAdmission, DeviceTermsAreTheCpuTermsOnTheGpu) {
  const ScenarioSpec cpu = parse_scenario(
      "name: t\nmodel: {preset: tiny}\nbatch: {seq_len: 16384}\nsweep: {sharder: load_balanced, transport: ring, cp: 4}\n",
      "t.yaml");
  const ScenarioSpec cuda = cuda_scenario("{seq_len: 16384}", "{sharder: load_balanced, transport: ring, cp: 4}");
  for (const bool ref : {true, false}) {
    const RankMemory host = estimate_rank_memory(cpu, cpu.cases[0], 0, ref);
    const RankMemory dev = estimate_device_memory(cuda, cuda.cases[0], ref);
    EXPECT_NEAR(dev.total, host.total + kCudaRuntimeBytes, 1e-12 * dev.total) << "reference rank " << ref;
  }
  // The reference (float64, S x S per layer) is cp-rank 0's alone.
  EXPECT_GT(estimate_device_memory(cuda, cuda.cases[0], true).total,
            4 * estimate_device_memory(cuda, cuda.cases[0], false).total);
  // Host memory of a cuda rank: the runtime only.
  EXPECT_EQ(estimate_rank_memory(cuda, cuda.cases[0], 1.0, true).terms.size(), 1u);
  // One GPU per rank: rank 0 (cp-rank 0) holds the reference; shared, the GPU's ranks add up.
  const std::vector<double> own = gpu_bytes(cuda, cuda.cases[0], 4);
  ASSERT_EQ(own.size(), 4u);
  EXPECT_DOUBLE_EQ(own[0], estimate_device_memory(cuda, cuda.cases[0], true).total);
  EXPECT_DOUBLE_EQ(own[3], estimate_device_memory(cuda, cuda.cases[0], false).total);
  const std::vector<double> shared = gpu_bytes(cuda, cuda.cases[0], 1);
  EXPECT_DOUBLE_EQ(shared[0], own[0] + own[1] + own[2] + own[3]);
}

TEST(CudaAdmission, RefusedFromAGivenFreeMemoryFigure) {
  const ScenarioSpec s = cuda_scenario("{seq_len: 16384}", "{sharder: load_balanced, transport: ring, cp: [2, 4]}");
  const double ref4 = estimate_device_memory(s, s.cases[1], true).total;
  const double ref2 = estimate_device_memory(s, s.cases[0], true).total;
  ASSERT_GT(ref4, 2 * kGiB);
  // Every GPU with just enough free memory for its ranks: admitted.
  EXPECT_EQ(refusal(s, gpus(4, ref2 * 1.01 / kGiB)), "");
  // cp-rank 0's GPU 1 % short: refused before any rank starts, naming case, GPU, both figures.
  const ScenarioSpec s4 = cuda_scenario("{seq_len: 16384}", "{sharder: load_balanced, transport: ring, cp: 4}");
  std::vector<GpuMemory> g = gpus(4, 100);
  g[0].free_bytes = ref4 * 0.99;
  const std::string msg = refusal(s4, g);
  EXPECT_TRUE(contains(msg, "admission refused: t.yaml: case load_balanced/ring/cp4/causal/float64: its ranks on GPU 0 "
                            "need ~" + format_bytes(ref4) + " of device memory")) << msg;
  EXPECT_TRUE(contains(msg, "NVIDIA H200 0 has " + format_bytes(ref4 * 0.99) + " free (cudaMemGetInfo)")) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  // The same free memory on a GPU no reference lands on admits it.
  g[0].free_bytes = 100 * kGiB;
  g[3].free_bytes = ref4 * 0.99;
  EXPECT_EQ(refusal(s4, g), "");
  // Four ranks sharing one GPU 1 % short of their sum: refused; at S = 16384 a smaller cp only moves the
  // reference rank's share up, so the key is named.
  const double free1 = gpu_bytes(s4, s4.cases[0], 1)[0] * 0.99;
  const std::string shared = refusal(s4, gpus(1, free1 / kGiB));
  EXPECT_TRUE(contains(shared, "case load_balanced/ring/cp4/causal/float64: its ranks on GPU 0")) << shared;
  EXPECT_TRUE(contains(shared, "batch.seq_len = 16384 drives it")) << shared;
  // A short sequence, where each rank's CUDA context dominates: the largest cp that fits is proposed.
  const ScenarioSpec small = cuda_scenario("{seq_len: 512}", "{sharder: load_balanced, transport: ring, cp: 4}");
  const double free_small = gpu_bytes(small, small.cases[0], 1)[0] - 0.5 * kCudaRuntimeBytes;
  const std::string fewer = refusal(small, gpus(1, free_small / kGiB));
  EXPECT_TRUE(contains(fewer, "cp <= 3 fits")) << fewer;
  // Nothing fits: the key that drives it; one term beyond the GPU's total: the key alone.
  const std::string none = refusal(s, gpus(4, 0.5));
  EXPECT_TRUE(contains(none, "batch.seq_len = 16384 drives it")) << none;
  EXPECT_TRUE(contains(none, "(and 1 more case)")) << none;
  const ScenarioSpec huge = cuda_scenario("{seq_len: 1048576}", "{sharder: load_balanced, transport: ring, cp: 8}");
  const std::string absurd = refusal(huge, gpus(8, 140));
  EXPECT_TRUE(contains(absurd, "admission refused: t.yaml: batch.seq_len: 1048576 is too large for this GPU")) << absurd;
  // Joined (torchrun): each of the node's local ranks counted as a reference rank.
  EXPECT_NE(refusal(s, gpus(4, ref4 * 0.99 / kGiB), 4, 4), "");
  EXPECT_EQ(refusal(s, gpus(4, ref4 * 1.01 / kGiB), 4, 4), "");
  // device: cpu or no GPU: nothing to check here.
  EXPECT_EQ(refusal(s, {}), "");
}

// The GPU check's scenarios (scripts/gpu-check.sh) fit one H200 (their shared cases on one GPU) or
// eight (gpu_nccl_multi at cp = the GPUs): admission never refuses the first GPU session's check.
TEST(CudaAdmission, ShippedGpuScenariosAreAdmittedOnH200s) {
  for (const char* name : {"gpu_shared", "gpu_shared_hybrid", "gpu_routes", "gpu_throughput", "gpu_nccl_multi"}) {
    const ScenarioSpec s = load_scenario(std::string(CPBENCH_SOURCE_DIR) + "/scenarios/" + name + ".yaml");
    EXPECT_EQ(refusal(s, gpus(std::string(name) == "gpu_nccl_multi" ? 8 : 1, 135)), "") << name;
  }
}

TEST(CudaAdmission, ChildOutputRoundTrips) {
  const std::vector<GpuMemory> g = {{"NVIDIA H200 NVL", 1.5e11, 1.507e11}, {"NVIDIA H100 80GB HBM3", 8.4e10, 8.5e10}};
  const std::vector<GpuMemory> back = parse_gpu_memory(format_gpu_memory(g));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].name, "NVIDIA H200 NVL");
  EXPECT_DOUBLE_EQ(back[1].free_bytes, 8.4e10);
  EXPECT_DOUBLE_EQ(back[1].total_bytes, 8.5e10);
  EXPECT_TRUE(parse_gpu_memory("").empty());
  EXPECT_THROW((void)parse_gpu_memory("lots of memory\n"), Error);
  // Without a GPU here the query finds none (and creates no context).
  if (!torch::cuda::is_available()) {
    EXPECT_TRUE(query_gpu_memory().empty());
  }
}
