#pragma once
// What one step of a mixer's layers needs on this rank, built once per step (never inside a layer) by
// the mixer's Mixer::cp_context / single_rank_context (kernels/mixers/mixer.hpp) and read by every layer
// of that mixer. Each mixer derives its own; the runner sees only this base.
#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "kernels/comm/communicator.hpp"

namespace cpbench {

class SectionClock;  // kernels/mixers/section_clock.hpp

struct MixerStepContext {
  virtual ~MixerStepContext() = default;
  const comm::Communicator* comm = nullptr;  // null: one rank, the stream as given
  std::string nvtx;                          // "cp:<sharder>"
  // When set, += the bytes this rank's collectives send to other ranks, forward and backward (a
  // backward's collectives send as many as the forward's: counted when the forward runs).
  int64_t* bytes_sent = nullptr;
  // When set, times every layer's mixer section (the recurrence and its collectives, fwd and bwd).
  SectionClock* clock = nullptr;
  // What one layer sends under the step's strategy, by the mixer's own formula; the runner checks every
  // step that the layers' count equals it times the layers.
  [[nodiscard]] virtual int64_t bytes_per_layer() const { return 0; }
  // What the mixer's `layers` layers send together (a mixer whose layers differ overrides it: DSA's
  // shared indexer layers).
  [[nodiscard]] virtual int64_t bytes_of_layers(int64_t layers) const { return layers * bytes_per_layer(); }
  // The strategy's name as the scenario axis spells it ("" for a mixer without one).
  [[nodiscard]] virtual std::string strategy_name() const { return ""; }
  // What the mixer's layers added to this rank's loss in the step's forward (DSA's indexer loss), in the
  // loss's normalisation (the CP ranks' parts sum to the single rank's); undefined: nothing.
  [[nodiscard]] virtual at::Tensor aux_loss() const { return {}; }
  // The keys the mixer's layers picked per query token (DSA's top-k), for the reference check: int64
  // [B, S_local, n] (n: every such layer's picks side by side), each pick the column of the key in the
  // step's gathered metadata in RANK order ([B, W*S_local]; one rank: the batch's own position), -1
  // for none. Undefined: the mixer picks nothing.
  [[nodiscard]] virtual at::Tensor key_picks() const { return {}; }
};

// The step's contexts, by mixer letter (only the mixers the model has).
using MixerContexts = std::map<char, std::shared_ptr<MixerStepContext>>;

}  // namespace cpbench
