#include "harness/cli/plan_command.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>

#include "harness/fs_util.hpp"
#include "harness/model/hf_config.hpp"
#include "harness/model/model.hpp"
#include "harness/planner/step/search.hpp"
#include "harness/planner/step/step_html.hpp"
#include "harness/planner/step/step_output.hpp"
#include "kernels/mixers/mixer.hpp"
#include "kernels/transports/transport.hpp"
#include "reports/json_report.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

void add_plan_options(CLI::App& cmd, PlanCommandOptions& o) {
  std::string models, clusters, types, tiny;
  for (const auto& m : plan::model_presets()) models += (models.empty() ? "" : ", ") + m.name;
  for (const auto& c : plan::cluster_presets()) clusters += (clusters.empty() ? "" : ", ") + c.name;
  for (const auto& t : known_model_types()) types += (types.empty() ? "" : ", ") + t;
  for (const auto& t : ModelConfig::preset_names()) tiny += (tiny.empty() ? "" : ", ") + t;
  cmd.add_option("--model", o.model,
                 "a Hugging Face config.json (model_type " + types + "), or a shipped one by name: " + models +
                     " (or cpbench's " + tiny + ")");
  cmd.add_option("--layers", o.layers,
                 "mixer layers (overrides the model; each layer kind, mixers and sliding / full attention, keeps its share and interleave)");
  cmd.add_option("--hidden", o.hidden, "hidden size");
  cmd.add_option("--heads", o.heads, "query heads (a model's query heads per kv head are kept)");
  cmd.add_option("--kv-heads", o.kv_heads, "key/value heads");
  cmd.add_option("--head-dim", o.head_dim, "head dimension (default hidden / heads)");
  cmd.add_option("--seq-len", o.seq_len, "tokens per sequence (default: the sum of --doc-lens)");
  cmd.add_option("--doc-lens", o.doc_lens, "packed document lengths, e.g. 4096,1024,3000")->delimiter(',');
  cmd.add_option("--doc-dist", o.doc_dist,
                 "document lengths drawn until --seq-len is filled: lognormal:mean=M[,sigma=S][,seed=N] or "
                 "uniform:min=A,max=B[,seed=N]");
  cmd.add_option("--cp", o.cps, "CP sizes W, e.g. 8,16,64 (required without --gpus; with it, default: every divisor)")
      ->delimiter(',');
  cmd.add_option("--mask", o.mask,
                 "causal, full, document or sliding_window:N (default: the model's sliding window when every "
                 "attention layer uses one, else causal)");
  cmd.add_option("--dtype", o.dtype, "bf16 (default), fp16, fp32, fp64");
  cmd.add_option("--cluster", o.cluster,
                 "cluster preset: " + clusters + " (default h100-nvlink, or h100-ib400 when a --cp value exceeds 8)");
  cmd.add_option("--flops", o.flops, "achieved attention FLOP/s per GPU (forward), overrides the cluster");
  cmd.add_option("--bandwidth", o.bandwidth, "link bandwidth per GPU and direction in B/s (intra- and inter-node)");
  cmd.add_option("--inter-bandwidth", o.inter_bandwidth, "inter-node bandwidth per GPU in B/s");
  cmd.add_option("--latency", o.latency, "per-message latency in seconds");
  cmd.add_option("--gpus-per-node", o.gpus_per_node, "GPUs per node (ranks beyond it use the inter-node link)");
  cmd.add_option("--sharders", o.sharders, "layouts to compare (default: every layout, without sdpa_wrap (load_balanced's layout) and the negative controls)")
      ->delimiter(',');
  std::string transports;
  for (const auto& t : planned_transports()) transports += (transports.empty() ? "" : ", ") + t;
  cmd.add_option("--transports", o.transports,
                 transports + " (default: all; hybrid is planned for every Ulysses degree 1 < U < W dividing W)")
      ->delimiter(',');
  for (const auto& m : mixers()) {  // one flag per mixer strategy axis (--ssm-cp for ssm_cp)
    if (m->strategy_axis().empty()) continue;
    std::string flag = "--" + m->strategy_axis(), strategies;
    std::replace(flag.begin(), flag.end(), '_', '-');
    for (const auto& t : m->strategies()) strategies += (strategies.empty() ? "" : ", ") + t;
    cmd.add_option(flag, o.mixer_cp[m->strategy_axis()],
                   m->label() + " CP strategies to plan for models with " + m->description() + " layers: " +
                       strategies + (m->strategies().size() == 2 ? " (default: both)" : " (default: all)"))
        ->delimiter(',');
  }
  cmd.add_option("--ssm-flops", o.ssm_flops, "achieved FLOP/s of the chunked SSM scan per GPU, overrides the cluster");
  cmd.add_option("--kernel", o.kernel,
                 "fitted (the cluster's kernel model, block by block; default), pairs (time ~ visible pairs, no "
                 "overheads) or blocks (cpbench's CPU transports)");
  cmd.add_option("--pass", o.pass, "train (forward + backward; default) or forward");
  cmd.add_option("--format", o.format, "table or json")->check(CLI::IsMember({"table", "json"}));
  cmd.add_option("--calibrate", o.calibrate, "report.json: fit FLOP/s and bandwidth from measured runs");
  // The whole step (docs/planner.md, "The whole step").
  cmd.add_option("--gpus", o.gpus, "price a whole training step on N GPUs (every layer, every parallel dimension)");
  cmd.add_option("--tp", o.tp, "tensor-parallel degree (with sequence parallel; within a node; default: searched)");
  cmd.add_option("--pp", o.pp, "pipeline-parallel degree (1F1B; default: searched)");
  cmd.add_option("--vp", o.vp, "virtual stages per pipeline rank (interleaved 1F1B; default 1)");
  cmd.add_option("--ep", o.ep, "expert-parallel degree (over dp x cp ranks; default: searched)");
  cmd.add_option("--dp", o.dp, "data-parallel degree (default: searched)");
  cmd.add_option("--zero", o.zero, "ZeRO stage 0|1|2|3 (3 = FSDP; default: 1 and 3 searched)");
  cmd.add_option("--offload", o.offload, "none (default) or optimizer (Adam on the CPU, ZeRO-Offload)");
  cmd.add_option("--recompute", o.recompute, "none, selective or full activation recompute (default: all three searched)");
  cmd.add_option("--precision", o.precision, "bf16 (default) or fp8 (FP8 GEMMs, bf16 attention)");
  cmd.add_option("--stack", o.stack,
                 "whose CP attention a step runs: cpbench (its transports; default) or pytorch-cp (PyTorch's "
                 "context_parallel of torch 2.6: SDPA per CP step, eager fp32 merges; load_balanced, allgather or ring)");
  cmd.add_option("--micro-batch", o.micro_batch, "sequences per micro-batch (default 1)");
  cmd.add_option("--global-batch", o.global_batch,
                 "sequences per step (default: micro-batch x dp, x 4 pp micro-batches with pipeline parallelism)");
  cmd.add_option("--memory", o.memory_gib, "GPU memory in GiB, overrides the cluster's");
  cmd.add_option("--html", o.html, "with --gpus: write a page of the top cases (step split, step time and memory vs cp)");
  cmd.add_option("--top", o.top, "with --gpus: cases shown (default 10)");
}

plan::step::StepRequest step_request_from_options(const PlanCommandOptions& o) {
  using namespace plan::step;
  StepRequest r;
  PlanCommandOptions a = o;
  if (a.cluster.empty()) a.cluster = o.gpus > 8 ? "h100-ib400" : "h100-nvlink";
  if (a.cps.empty()) a.cps = {1};  // the attention request's own validation; the step searches CP itself
  r.attention = plan_request_from_options(a);
  r.attention.cps = o.cps;
  r.gpus = o.gpus;
  r.tp = o.tp, r.pp = o.pp, r.vp = o.vp, r.ep = o.ep, r.dp = o.dp, r.zero = o.zero;
  CP_CHECK_USAGE(o.zero >= -1 && o.zero <= 3, "--zero: expected 0, 1, 2 or 3, got ", o.zero);
  r.offload = parse_offload(o.offload);
  if (!o.recompute.empty()) r.recompute = {parse_recompute(o.recompute)};
  r.precision = parse_precision(o.precision);
  r.stack = parse_stack(o.stack);
  r.micro_batch = o.micro_batch;
  r.global_batch = o.global_batch;
  CP_CHECK_USAGE(o.memory_gib >= 0, "--memory: expected GiB >= 0, got ", o.memory_gib);
  if (o.memory_gib > 0) r.attention.cluster.memory_bytes = o.memory_gib * static_cast<double>(1ull << 30);
  CP_CHECK_USAGE(o.top >= 1, "--top: expected >= 1, got ", o.top);
  r.top = o.top;
  for (size_t i = 0; i < o.cps.size(); ++i)
    CP_CHECK_USAGE(o.cps[i] >= 1, "--cp[", i, "]: ", o.cps[i], " is not a CP size (W must be >= 1)");
  return r;
}

plan::PlanRequest plan_request_from_options(const PlanCommandOptions& o, plan::Calibration* calibration) {
  plan::PlanRequest r;
  const bool config_path = o.model.find('/') != std::string::npos ||
                           (o.model.size() > 5 && o.model.compare(o.model.size() - 5, 5, ".json") == 0);
  if (config_path || find_shipped_model(o.model)) {
    // A real model's config: the size flags override it keeping its ratios (HfModel's with_overrides).
    ModelOverrides ov;
    ov.key = "--";
    ov.layers = o.layers;
    ov.hidden = o.hidden;
    ov.heads = o.heads;
    ov.kv_heads = o.kv_heads;
    ov.head_dim = o.head_dim;
    r.model = plan::model_shape(with_overrides(model_from_config_or_name(o.model), ov));
  } else {
    if (!o.model.empty()) r.model = plan::model_preset(o.model);
    if (o.layers > 0) {
      r.model.layers = o.layers;
      if (!r.model.mixers.empty()) r.model.mixers = resample_mixers(r.model.mixers, o.layers, "--layers", r.model.name + "'s mixer layers");
    }
    if (o.hidden > 0) r.model.hidden = o.hidden;
    if (o.heads > 0) r.model.heads = o.heads;
    if (o.kv_heads > 0) r.model.kv_heads = o.kv_heads;
    if (o.head_dim > 0) r.model.head_dim = o.head_dim;
    if (r.model.head_dim <= 0 && r.model.hidden > 0 && r.model.heads > 0)
      r.model.head_dim = r.model.hidden / r.model.heads;
    if (!o.model.empty() && (o.layers > 0 || o.hidden > 0 || o.heads > 0 || o.kv_heads > 0 || o.head_dim > 0))
      r.model.name += "+custom";
  }

  CP_CHECK_USAGE(o.doc_lens.empty() || o.doc_dist.empty(), "--doc-lens and --doc-dist: give one of them, not both");
  r.seq_len = o.seq_len;
  CP_CHECK_USAGE(o.seq_len >= 0, "--seq-len: expected a positive number of tokens, got ", o.seq_len);
  r.doc_lens = o.doc_dist.empty() ? o.doc_lens : plan::draw_documents(o.doc_dist, o.seq_len);
  r.cps = o.cps;
  // A model whose every attention layer slides is planned with its window unless --mask says otherwise.
  const plan::ModelShape& m = r.model;
  r.mask = !o.mask.empty() ? o.mask
           : m.sliding_window > 0 && m.sliding_layers == m.attention_layers()
               ? "sliding_window:" + std::to_string(m.sliding_window)
               : "causal";
  r.mixer_strategies = o.mixer_cp;
  r.dtype = o.dtype;
  r.kernel = plan::parse_kernel(o.kernel);
  r.pass = plan::parse_pass(o.pass);
  r.sharders = o.sharders;
  if (!o.transports.empty()) r.transports = o.transports;

  r.cluster = plan::cluster_preset(o.cluster.empty() ? plan::default_cluster(o.cps) : o.cluster);
  if (!o.calibrate.empty()) {
    CP_CHECK_USAGE(fsu::exists(o.calibrate), "--calibrate: cannot read '", o.calibrate,
                   "' (expected a report.json written by cpbench run)");
    Report report;
    try {
      report = report_from_json(read_json_file(o.calibrate));
    } catch (const std::exception& e) {
      throw UsageError(detail::concat("--calibrate: ", e.what()));
    }
    const plan::Calibration cal = plan::calibrate(report);
    CP_CHECK_USAGE(cal.attention_flops > 0 || cal.bandwidth > 0, "--calibrate '", o.calibrate, "': nothing to fit (",
                   cal.results, " ok results; ", cal.notes.empty() ? "" : cal.notes.front(), ")");
    r.cluster = plan::calibrated(r.cluster, cal);
    if (calibration) *calibration = cal;
  }
  // Explicit flags win over the preset and the calibration.
  if (o.flops > 0) r.cluster.attention_flops = o.flops;
  if (o.bandwidth > 0) r.cluster.intra_bandwidth = r.cluster.inter_bandwidth = o.bandwidth;
  if (o.inter_bandwidth > 0) r.cluster.inter_bandwidth = o.inter_bandwidth;
  if (o.latency >= 0) r.cluster.latency_s = o.latency;
  if (o.gpus_per_node > 0) r.cluster.gpus_per_node = o.gpus_per_node;
  if (o.ssm_flops > 0) r.cluster.ssm_flops = o.ssm_flops;
  if (o.flops > 0 || o.bandwidth > 0 || o.inter_bandwidth > 0 || o.latency >= 0 || o.gpus_per_node > 0 ||
      o.ssm_flops > 0)
    r.cluster.name += "+custom";
  return r;
}

int run_plan_command(const PlanCommandOptions& o) {
  CP_CHECK_USAGE(o.format == "table" || o.format == "json", "--format: expected table or json, got '", o.format, "'");
  const bool step_flags = o.tp > 0 || o.pp > 0 || o.vp > 0 || o.ep > 0 || o.dp > 0 || o.zero >= 0 ||
                          o.offload != "none" || !o.recompute.empty() || o.precision != "bf16" || o.stack != "cpbench" || o.micro_batch != 1 ||
                          o.global_batch > 0 || !o.html.empty();
  if (o.gpus > 0 || step_flags) {
    CP_CHECK_USAGE(o.gpus > 0, "--gpus: the whole-step flags (--tp, --pp, --zero, --html, ...) need --gpus N");
    const plan::step::StepPlan p = plan::step::make_step_plan(step_request_from_options(o));
    if (!o.html.empty()) plan::step::write_step_html(p, o.html);
    if (o.format == "json")
      std::cout << plan::step::step_plan_to_json(p).dump() << "\n";
    else
      std::cout << plan::step::step_plan_to_table(p);
    return 0;
  }
  CP_CHECK_USAGE(!o.cps.empty(), "--cp: give at least one CP size, e.g. --cp 8,16,64 (or --gpus N for a whole step)");
  plan::Calibration cal;
  const plan::PlanRequest request = plan_request_from_options(o, &cal);
  const plan::Plan p = plan::make_plan(request);
  if (o.format == "json") {
    nlohmann::json j = plan::plan_to_json(p);
    if (!o.calibrate.empty()) {
      j["calibration"] = plan::calibration_to_json(cal);
      std::cerr << plan::calibration_to_text(cal);
    }
    std::cout << j.dump() << "\n";
  } else {
    if (!o.calibrate.empty()) std::cout << plan::calibration_to_text(cal) << "\n";
    std::cout << plan::plan_to_table(p);
  }
  return 0;
}

}  // namespace cpbench
