#pragma once
// Scenario: a YAML file parsed and validated in one place into plain structs with defaults.
// Nothing downstream sees YAML. Errors are UsageError "FILE: key.path[i]: what was expected, got X".
// The schema (every key, default and unit) is documented in docs/scenarios.md.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <c10/core/ScalarType.h>

#include "harness/model/data.hpp"
#include "harness/model/model.hpp"
#include "harness/runner/measurement.hpp"
#include "kernels/transports/transport.hpp"
#include "sharders/mask.hpp"

namespace cpbench {


// What a case must show against the single-rank reference: `mismatch` marks a negative control.
enum class Expect { match, mismatch };
enum class DeviceKind { cpu, cuda };
// The scenario's `kernels` key: which block kernels attention runs on (kernels/attention/fused_attention.hpp).
//   fused           the fused routes (the default; on CUDA bf16 / fp16: flash, with FA2's roundings)
//   tiled           every block on the tiled kernel (the fused kernels' CPU twin)
//   flash_numerics  every block on the tiled kernel with FlashAttention-2's 16-bit roundings, and the
//                   bf16 single-rank reference through the same kernel: a GPU's bf16 numerics on a CPU
//                   (docs/correctness.md, "Flash numerics")
enum class AttentionKernels { fused, tiled, flash_numerics };
[[nodiscard]] const char* to_string(AttentionKernels kernels);
[[nodiscard]] const char* to_string(Expect expect);
[[nodiscard]] const char* to_string(DeviceKind device);
// The scenario's dtype names: float64, float32, bfloat16 (UsageError listing them otherwise).
[[nodiscard]] at::ScalarType parse_dtype(const std::string& name);
[[nodiscard]] std::string dtype_name(at::ScalarType dtype);

// One case, typed once here; nothing downstream re-parses its fields.
struct CaseSpec {
  int64_t index = 0;        // position in the scenario's expanded case list
  std::string sharder;      // canonical registry name
  std::string transport;    // registry name
  // The sliding_attention layers' transport (the `transport_sliding` axis; model.attention.layer_types):
  // registry name, "" = `transport`. Their mask is sliding_mask.
  std::string sliding_transport;
  MaskSpec sliding_mask{MaskSpec::Kind::sliding_window, 0};  // window 0: the model has no sliding layers
  [[nodiscard]] const std::string& transport_of_sliding() const {
    return sliding_transport.empty() ? transport : sliding_transport;
  }
  int64_t ulysses = 0;      // hybrid's Ulysses degree (divides cp); 0 for every other transport
  int64_t cp = 1;
  int64_t dp = 1;
  MaskSpec mask;
  at::ScalarType dtype = at::kDouble;
  Expect expect = Expect::match;
  // How each mixer with a strategy axis runs under CP, by axis (Mixer::strategy_axis: "ssm_cp" ->
  // "state_passing"); a mixer's default strategy when absent.
  std::map<std::string, std::string> mixer_cp;
  [[nodiscard]] std::string mixer_strategy(const Mixer& mixer) const;
  // The `routes` key: the kernel routes (kernels::to_string names, never "skipped") the case's
  // attention blocks must run on, exactly; empty: not checked (case_metrics.hpp route_mismatch).
  std::vector<std::string> routes;
  [[nodiscard]] int64_t world_size() const { return cp * dp; }
  [[nodiscard]] TransportOptions transport_options() const { return TransportOptions{ulysses}; }
  // "load_balanced/ring/cp2/causal/float64" (+ "/dp2" when dp > 1, + each mixer's Mixer::case_suffix for
  // a strategy other than its default, e.g. "/state_passing"; hybrid: "hybrid-u2" for ulysses 2; + "/sliding-<t>"
  // for a transport_sliding t)
  [[nodiscard]] std::string name() const;
};

struct ScenarioSpec {
  std::string file;          // as given on the command line
  std::string name;
  std::string description;
  ModelConfig model;
  BatchSpec batch;
  DeviceKind device = DeviceKind::cpu;
  MeasureSpec measure;
  int64_t timeout_s = 120;     // collective timeout per case, seconds
  // How long the CP group's other ranks wait for cp-rank 0's single-rank references (a store key set
  // after them, case_runner.cpp) before the step's first collective, seconds: the references may take
  // far longer than a collective may wait.
  int64_t reference_timeout_s = 1800;
  bool share_gpu = false;      // device: cuda with more ranks per node than GPUs: share them over Gloo
  AttentionKernels kernels = AttentionKernels::fused;
  std::vector<CaseSpec> cases;
};

// `overrides`: "key=[v1,v2]" or "key=v" replacing a sweep axis (sharder, transport, ulysses, cp, dp,
// mask, dtype, expect, ssm_cp) in every sweep block. Throws UsageError.
[[nodiscard]] ScenarioSpec load_scenario(const std::string& file, const std::vector<std::string>& overrides = {});
[[nodiscard]] ScenarioSpec parse_scenario(const std::string& yaml_text, const std::string& file_label,
                                          const std::vector<std::string>& overrides = {});

// Keeps the cases whose name matches `regex` (ECMAScript, search semantics).
[[nodiscard]] std::vector<CaseSpec> filter_cases(const std::vector<CaseSpec>& cases, const std::string& regex);

// The closest of `known` to `word` within a small edit distance, or "".
[[nodiscard]] std::string did_you_mean(const std::string& word, const std::vector<std::string>& known);

}  // namespace cpbench
