// What a report records about the platform (harness/runner/platform.hpp), through JSON and Markdown,
// and the scenario keys of the GPU path (share_gpu, float16).
#include <gtest/gtest.h>

#include <torch/torch.h>

#include "harness/runner/platform.hpp"
#include "harness/runner/scenario.hpp"
#include "reports/json_report.hpp"
#include "reports/text_report.hpp"

namespace cpbench {
namespace {

TEST(Platform, ReportsEveryFieldAndTheJobShape) {
  const auto p = platform_info(4, 2);
  for (const char* key :
       {"gpu_count", "gpu_name", "driver", "cuda_runtime", "cudnn", "nccl", "torch_build", "nodes", "local_world_size"})
    EXPECT_TRUE(p.count(key)) << key;
  EXPECT_EQ(p.at("nodes"), "2");
  EXPECT_EQ(p.at("local_world_size"), "2");
  EXPECT_NE(p.at("torch_build").find(TORCH_VERSION), std::string::npos);
  // The wheel is a CUDA build carrying NCCL and cuDNN whether or not a GPU is present.
  EXPECT_NE(p.at("nccl"), "n/a");
  EXPECT_NE(p.at("cuda_runtime"), "n/a");
  if (!torch::cuda::is_available()) {
    EXPECT_EQ(p.at("gpu_count"), "0");
    EXPECT_EQ(p.at("gpu_name"), "n/a");
  } else {
    EXPECT_NE(p.at("gpu_name"), "n/a");
    EXPECT_NE(p.at("driver"), "n/a");
  }
}

TEST(Platform, TravelsThroughJsonAndMarkdown) {
  Report r;
  r.scenario_name = "x";
  r.env.platform = platform_info(2, 1);
  const Report back = report_from_json(to_json(r));
  EXPECT_EQ(back.env.platform, r.env.platform);
  const std::string md = markdown_report(r);
  EXPECT_NE(md.find("nccl `" + r.env.platform.at("nccl") + "`"), std::string::npos) << md;
  EXPECT_NE(md.find("nodes `2`"), std::string::npos) << md;
}

TEST(Platform, ScenarioAcceptsShareGpuAndFloat16) {
  const ScenarioSpec s = parse_scenario(R"(name: g
model: {preset: tiny}
batch: {batch_size: 1, seq_len: 64}
device: cuda
share_gpu: true
sweep: {sharder: contiguous, transport: ring, cp: 2, dtype: [float16, bfloat16]}
)",
                                        "g.yaml");
  EXPECT_TRUE(s.share_gpu);
  EXPECT_EQ(parse_dtype("float16"), at::kHalf);
  EXPECT_EQ(dtype_name(at::kHalf), "float16");
  EXPECT_FALSE(parse_scenario("name: g\nmodel: {preset: tiny}\nbatch: {batch_size: 1, seq_len: 64}\n", "g.yaml").share_gpu);
}

}  // namespace
}  // namespace cpbench
