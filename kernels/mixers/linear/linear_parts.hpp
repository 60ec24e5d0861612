#pragma once
// What a linear-recurrence mixer hands the shared machinery, as data: its config's place in MixerConfigs,
// its layer, its channel split (LinearLayerSpec), its cost shape and terms. Its strategy names come
// with its Strategy enum (strategy_table, linear_costs.hpp), its layer's widths with its Config
// (in_proj_width(), out_width(), conv_channels(), conv, chunk). From these, written once here and in
// linear_mixer.hpp (LinearMixerOf), come its step contexts (the reference rank's and a CP rank's) and the
// plumbing of its registry entry. A mixer declares one overload
//
//   const LinearParts<Config, Strategy, Shape, Context>& linear_parts(const Config&);
//
// in its header and defines it beside its layer; the builders below find it by the config's type.
#include <ATen/ATen.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/mixers/linear/linear_costs.hpp"
#include "kernels/mixers/linear/linear_step.hpp"
#include "kernels/mixers/mixer.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

template <class ConfigT, class StrategyT, class ShapeT, class ContextT>
struct LinearParts {
  using Config = ConfigT;
  using Strategy = StrategyT;  // its first value is the channel-parallel default
  using Shape = ShapeT;
  using Context = ContextT;
  Config MixerConfigs::*config;                     // the mixer's sizes in a model's MixerConfigs
  std::unique_ptr<MixerLayer> (*layer)(const Config&, const LayerInit&);
  LinearLayerSpec (*spec)(const Config&);           // conv, chunk, heads and the channel split
  Shape (*shape)(const Config&, const LinearCpShape&);
  // Its strategy's terms: linear_cp_bytes of them is what a layer sends per rank (checked every step),
  // linear_cp_extra_memory_bytes CP's extra bytes per layer and rank.
  LinearCpTermsFn<Strategy, Shape> terms;
};

// The layer factory of LinearParts::layer for a layer type constructed from (config, init).
template <class Layer, class Config>
[[nodiscard]] std::unique_ptr<MixerLayer> make_linear_layer(const Config& c, const LayerInit& init) {
  return std::make_unique<Layer>(c, init);
}

// LinearParts::spec from the mixer's name, its heads and its channel split `channels(config, W, q,
// conv_coords)`; the refusal is the config's cp_unsupported_reason. `c` must outlive the spec.
template <class Config>
[[nodiscard]] LinearLayerSpec linear_spec(const char* who, const Config& c, int64_t heads,
                                          std::vector<int64_t> (*channels)(const Config&, int64_t, int64_t, bool)) {
  return {who, c.conv, c.chunk, heads,
          [&c, channels](int64_t W, int64_t q, bool conv_coords) { return channels(c, W, q, conv_coords); },
          [&c](int64_t cp) { return c.cp_unsupported_reason(cp); }};
}

// A linear mixer's recurrent part: proj [R, S_local, width] (checked, naming `who` and the rank), the case's
// strategy's path (`state_passing(proj)` or `channel_parallel(proj)`, both [R, S_local, width_out]), the
// result checked against that shape.
template <class Context, class StatePassing, class ChannelParallel>
[[nodiscard]] at::Tensor linear_forward(const at::Tensor& proj, const Context& ctx, int64_t width, int64_t width_out,
                                        const char* who, const StatePassing& state_passing,
                                        const ChannelParallel& channel_parallel) {
  const int64_t r = ctx.comm ? ctx.comm->rank() : 0;
  CP_CHECK(proj.dim() == 3 && proj.size(2) == width, who, ": proj ", shape_str(proj.sizes()), ", expected [R, S_local, ",
           width, "] (rank ", r, ")");
  const bool passing = ctx.strategy == decltype(ctx.strategy)::state_passing;
  at::Tensor out = passing ? state_passing(proj) : channel_parallel(proj);
  CP_CHECK(out.dim() == 3 && out.size(0) == proj.size(0) && out.size(1) == proj.size(1) && out.size(2) == width_out,
           who, ": output ", shape_str(out.sizes()), ", expected [", proj.size(0), ", ", proj.size(1), ", ", width_out,
           "] (rank ", r, ")");
  return out;
}

// A linear mixer's recurrent part under the case's strategy: proj [R, S_local, config.in_proj_width()] (this
// rank's tokens) -> [R, S_local, config.out_width()] (every head's output for them), by one of the mixer's
// two paths, declared beside its Params and found by argument-dependent lookup:
//   state_passing_forward(proj, params, config, ctx)     under state passing (ctx.state_passing set)
//   channel_parallel_forward(proj, params, config, ctx)  its default strategy, and one rank
// Collective over ctx.comm.
template <class Params, class Config, class Context>
[[nodiscard]] at::Tensor linear_forward(const at::Tensor& proj, const Params& params, const Config& c,
                                        const Context& ctx) {
  return linear_forward(
      proj, ctx, c.in_proj_width(), c.out_width(), linear_parts(c).spec(c).who,
      [&](const at::Tensor& p) { return state_passing_forward(p, params, c, ctx); },
      [&](const at::Tensor& p) { return channel_parallel_forward(p, params, c, ctx); });
}

// The parts of the mixer whose config is `Config`.
template <class Config>
using LinearPartsOf = std::decay_t<decltype(linear_parts(std::declval<const Config&>()))>;

// The single-rank context (the reference): the batch's rows as given, `meta` [B, S].
template <class Config>
[[nodiscard]] typename LinearPartsOf<Config>::Context single_rank_linear_context(const TokenMeta& meta,
                                                                                const MaskSpec& mask,
                                                                                const Config& config,
                                                                                at::ScalarType dtype,
                                                                                const at::Device& device) {
  const auto& parts = linear_parts(config);
  typename LinearPartsOf<Config>::Context ctx;
  fill_single_rank_context(ctx, parts.spec(config), meta, mask, dtype, device);
  ctx.terms = parts.terms;
  ctx.shape = parts.shape(config, linear_cp_shape(meta.batch(), meta.tokens(), 1, config.conv,
                                                  static_cast<int64_t>(c10::elementSize(dtype))));
  return ctx;
}

// A CP rank's context: `layout` = sharder.shard_layout().global; `all_meta` every rank's metadata in rank
// order ([R, W * S_local], what the runner all-gathers). Throws naming the mixer's key when the strategy
// cannot split the layer.
template <class Config>
[[nodiscard]] typename LinearPartsOf<Config>::Context cp_linear_context(
    const comm::Communicator& comm, const GlobalLayout& layout, const TokenMeta& all_meta, const MaskSpec& mask,
    const Config& config, at::ScalarType dtype, const at::Device& device, std::string nvtx,
    const LinearCpOptions<typename LinearPartsOf<Config>::Strategy>& options = {}) {
  using Strategy = typename LinearPartsOf<Config>::Strategy;
  const auto& parts = linear_parts(config);
  typename LinearPartsOf<Config>::Context ctx;
  ctx.strategy = options.strategy;
  ctx.terms = parts.terms;
  ctx.shape = parts.shape(config, linear_cp_shape(all_meta.batch(), layout.padded_seq_len, comm.size(), config.conv,
                                                  static_cast<int64_t>(c10::elementSize(dtype))));
  const LinearCpRequest request{options.strategy == Strategy::state_passing, options.drop_incoming_state,
                                options.undo_chunk_order};
  ctx.shape.chunks_per_rank = fill_cp_context(ctx, parts.spec(config), comm, layout, all_meta, mask, dtype, device,
                                              std::move(nvtx), request);
  return ctx;
}

}  // namespace cpbench
