// The GPU tests' arguments and expectations, checked on the CPU (tests/gpu/gpu_cases.hpp): what a
// GPU test builds before its first device call, and what it expects of the device choice, must be
// right on a machine without a GPU too. And the scenarios scripts/gpu-check.sh runs on one GPU admit
// every case there.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <filesystem>
#include <map>
#include <set>

#include "harness/runner/device_choice.hpp"
#include "harness/runner/scenario.hpp"
#include "tests/gpu/gpu_cases.hpp"
#include "tests/test_paths.hpp"

namespace cpbench {
namespace {

TEST(GpuCases, NcclWorldOfOneIsAGroupNcclAccepts) {
  const comm::GroupSpec s = gpu_cases::nccl_world_of_one(0);
  EXPECT_EQ(s.kind, comm::BackendKind::nccl);
  EXPECT_EQ(comm::group_spec_error(s), "") << "Gpu.NcclWorldOfOneCollectives would fail at ProcessGroup::create";
}

TEST(GpuCases, GroupSpecErrorNamesWhatCreateRefuses) {
  comm::GroupSpec s = gpu_cases::nccl_world_of_one(0);
  s.device.reset();
  EXPECT_NE(comm::group_spec_error(s).find("NCCL needs the CUDA device"), std::string::npos);
  s.device = at::Device(at::kCPU);
  EXPECT_NE(comm::group_spec_error(s).find("NCCL needs the CUDA device"), std::string::npos);
  s = gpu_cases::nccl_world_of_one(0);
  s.global_rank = 3;
  EXPECT_NE(comm::group_spec_error(s).find("is not a member"), std::string::npos);
  s.kind = comm::BackendKind::gloo;
  s.global_rank = 0;
  s.device.reset();
  EXPECT_EQ(comm::group_spec_error(s), "");
}

// Gpu.RunnerPassesTheGradientCheckOnCuda runs its scenario as one node of `cp` ranks: the backend
// it expects must be the one choose_device picks, on a machine with any number of GPUs.
TEST(GpuCases, RunnerBackendExpectationIsTheDeviceChoice) {
  const ScenarioSpec s = parse_scenario(gpu_cases::runner_scenario_yaml(), "gpu_cases::runner_scenario_yaml");
  ASSERT_FALSE(s.cases.empty());
  EXPECT_EQ(s.device, DeviceKind::cuda);
  for (int visible : {1, 2, 4, 8}) {
    for (const CaseSpec& c : s.cases) {
      for (int lr = 0; lr < c.world_size(); ++lr) {
        const DeviceChoice d = choose_device(true, lr, static_cast<int>(c.world_size()), visible, s.share_gpu);
        EXPECT_EQ(std::string(comm::to_string(d.backend)),
                  std::string(comm::to_string(gpu_cases::expected_runner_backend(c.cp, visible))))
            << c.name() << " on " << visible << " GPU(s), local rank " << lr;
      }
    }
  }
}

// Gpu.RunnerPassesTheGradientCheckOnCuda runs inside gpu-check.sh's gpu-tests budget: its scenario is a
// correctness sweep (collectives not timed on the side, exactly one timed step a case, no warm-up).
TEST(GpuCases, RunnerScenarioTimesOneStepAndNoCollectives) {
  const ScenarioSpec s = parse_scenario(gpu_cases::runner_scenario_yaml(), "gpu_cases::runner_scenario_yaml");
  EXPECT_FALSE(s.measure.collectives) << "every case would time its collectives alone after the check";
  EXPECT_EQ(s.measure.max_time_s, 0) << "timed steps until the noise rule holds, not one";
  EXPECT_EQ(s.measure.iters, 1);
  EXPECT_EQ(s.measure.warmup, 0);
}

// scripts/gpu-check.sh runs the gpu_*.yaml scenarios on one GPU (gpu_nccl*.yaml only with two or
// more): every case of more than one rank must share the GPU over Gloo there, never be refused nor
// pair NCCL ranks on one device.
TEST(GpuCases, OneGpuScenariosShareTheGpuForEveryMultiRankCase) {
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(CPBENCH_SOURCE_DIR) + "/scenarios")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("gpu_", 0) != 0 || name.rfind("gpu_nccl", 0) == 0 || e.path().extension() != ".yaml") continue;
    ++files;
    const ScenarioSpec s = load_scenario(e.path().string());
    EXPECT_EQ(s.device, DeviceKind::cuda) << name;
    for (const CaseSpec& c : s.cases) {
      const int w = static_cast<int>(c.world_size());
      for (int lr = 0; lr < w; ++lr) {
        DeviceChoice d;
        ASSERT_NO_THROW(d = choose_device(true, lr, w, 1, s.share_gpu)) << name << ": " << c.name();
        if (w > 1) {
          EXPECT_TRUE(d.shared_gpu) << name << ": " << c.name() << " (W = " << w << ") on one GPU needs share_gpu: true";
          EXPECT_EQ(d.backend, comm::BackendKind::gloo) << name << ": " << c.name();
        }
      }
    }
  }
  EXPECT_GE(files, 3);
}

// The `routes` pins of the scenarios scripts/gpu-check.sh runs are the routes the CUDA plans take
// (gpu_cases::case_routes, planned here as a GPU step plans them): a wrong pin would fail a correct
// GPU run, a missing one lets a fused kernel's fallback pass. Every case of gpu_routes.yaml and every
// bfloat16 case is pinned, and together they run every CUDA route: flash, its window and varlen
// arguments and the memory-efficient kernel in bfloat16, the memory-efficient kernel in float32, the
// tiled kernel in float64.
TEST(GpuCases, GpuScenariosPinTheRoutesTheirCudaPlansTake) {
  std::map<std::string, std::set<std::string>> by_dtype;
  int pinned = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::string(CPBENCH_SOURCE_DIR) + "/scenarios")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("gpu_", 0) != 0 || e.path().extension() != ".yaml") continue;
    const ScenarioSpec s = load_scenario(e.path().string());
    for (const CaseSpec& c : s.cases) {
      SCOPED_TRACE(name + ": " + c.name());
      // Not pinned: the throughput benchmark's scenario, and gpu_nccl_multi.yaml, which gpu-check.sh
      // runs at cp = the GPUs (-a cp=[N]), where the routes differ (at cp 8, load_balanced's 96-token
      // chunks add window blocks; thd's documents a memory-efficient one).
      const bool unpinned = name == "gpu_throughput.yaml" || name == "gpu_nccl_multi.yaml";
      if (name == "gpu_routes.yaml" || (c.dtype == at::kBFloat16 && !unpinned)) {
        EXPECT_FALSE(c.routes.empty()) << "not pinned";
      }
      if (c.routes.empty() || c.expect != Expect::match) continue;
      ++pinned;
      std::set<std::string> predicted;
      for (const auto& [route, n] : gpu_cases::total_routes(gpu_cases::case_routes(s, c, at::Device(at::kCUDA, 0))))
        if (route != "skipped") predicted.insert(route);
      EXPECT_EQ(std::set<std::string>(c.routes.begin(), c.routes.end()), predicted);
      by_dtype[dtype_name(c.dtype)].insert(predicted.begin(), predicted.end());
    }
  }
  EXPECT_GE(pinned, 60);
  EXPECT_EQ(by_dtype["bfloat16"],
            (std::set<std::string>{"cuda_efficient", "cuda_flash", "cuda_flash_varlen", "cuda_flash_window"}));
  EXPECT_EQ(by_dtype["float32"], (std::set<std::string>{"cuda_efficient"}));
  EXPECT_EQ(by_dtype["float64"], (std::set<std::string>{"tiled"}));
}

// gpu-check.sh has 8 minutes for everything: no scenario it runs may time the collectives on the side
// (measure.collectives, on by default: a second or more per case, 58 cases in the shared step alone).
// The scenarios are the ones the script names; a scenario it names and this cannot find fails too.
TEST(GpuCases, TheCheckTimesNoCollectives) {
  std::ifstream in(std::string(CPBENCH_SOURCE_DIR) + "/scripts/gpu-check.sh");
  ASSERT_TRUE(in) << "scripts/gpu-check.sh";
  const std::string script((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::regex named(R"(scenarios/(gpu_[A-Za-z0-9_]+)\.yaml)");
  std::set<std::string> files;
  for (auto it = std::sregex_iterator(script.begin(), script.end(), named); it != std::sregex_iterator(); ++it)
    files.insert((*it)[1].str());
  EXPECT_GE(files.size(), 4u) << "the check names fewer scenarios than it runs";
  for (const std::string& f : files) {
    const ScenarioSpec s = load_scenario(std::string(CPBENCH_SOURCE_DIR) + "/scenarios/" + f + ".yaml");
    EXPECT_FALSE(s.measure.collectives) << "scenarios/" << f << ".yaml: measure.collectives is on in a scenario gpu-check.sh runs";
  }
}

}  // namespace
}  // namespace cpbench
