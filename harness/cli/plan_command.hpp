#pragma once
// `cpbench plan`: command-line glue for the planner (harness/planner/plan.hpp). main.cpp adds the subcommand
// with add_plan_options and dispatches to run_plan_command; everything else is in the library.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harness/planner/plan.hpp"
#include "harness/planner/step/step_types.hpp"

namespace CLI {
class App;
}

namespace cpbench {

// Flags as given; 0 / empty / negative latency = not given.
struct PlanCommandOptions {
  std::string model;  // a shipped model's name (scenarios/models/<name>.json), tiny/small, or a config.json path
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0;  // override the preset
  int64_t seq_len = 0;
  std::vector<int64_t> doc_lens;
  std::string doc_dist;  // e.g. lognormal:mean=4096,sigma=1,seed=1
  std::vector<int64_t> cps;
  std::string mask;  // empty: the model's sliding window when every attention layer uses it, else causal
  std::string dtype = "bf16";
  std::string cluster;  // empty: plan::default_cluster(cps)
  double flops = 0, bandwidth = 0, inter_bandwidth = 0, latency = -1;
  int64_t gpus_per_node = 0;
  std::vector<std::string> sharders;    // empty = planner default
  std::vector<std::string> transports;  // empty = every registered transport
  // Each mixer's CP strategies by its axis (--ssm-cp fills "ssm_cp"); empty = every one.
  std::map<std::string, std::vector<std::string>> mixer_cp;
  double ssm_flops = 0;                 // overrides the cluster's
  std::string kernel = "fitted";
  std::string pass = "train";  // train (forward + backward) | forward
  std::string format = "table";  // table | json
  std::string calibrate;         // report.json to fit FLOP/s and bandwidth from
  // The whole step (harness/planner/step/): with --gpus the plan prices every layer and every parallel
  // dimension; 0 / empty = search it.
  int64_t gpus = 0, tp = 0, pp = 0, vp = 0, ep = 0, dp = 0;
  int64_t zero = -1;              // -1: search 1 and 3
  std::string offload = "none";   // none | optimizer
  std::string recompute;          // none | selective | full; empty: search all three
  std::string precision = "bf16";  // bf16 | fp8
  std::string stack = "cpbench";   // cpbench | pytorch-cp: whose CP attention (docs/planner.md, "The stack")
  int64_t micro_batch = 1, global_batch = 0;
  double memory_gib = 0;          // overrides the cluster's GPU memory
  std::string html;               // write the page here
  int64_t top = 10;               // cases shown
};

// Registers every flag of `cpbench plan` on `command`, writing into `options`.
void add_plan_options(CLI::App& command, PlanCommandOptions& options);
// Resolves presets, the document mix and the calibration into a request; UsageError on bad input.
// `calibration` (optional) receives the fit when --calibrate is given.
[[nodiscard]] plan::PlanRequest plan_request_from_options(const PlanCommandOptions& options,
                                                          plan::Calibration* calibration = nullptr);
// The whole-step request (--gpus given); UsageError on bad input.
[[nodiscard]] plan::step::StepRequest step_request_from_options(const PlanCommandOptions& options);
// Prints the plan (table or JSON) on stdout; returns the exit status.
int run_plan_command(const PlanCommandOptions& options);

}  // namespace cpbench
