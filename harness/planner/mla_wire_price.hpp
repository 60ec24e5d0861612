#pragma once
// The planner's choice of MLA's wire (model.attention.mla_wire; kernels/attention/mla.hpp): the bytes
// each wire sends against the up-projection FLOPs the latent wire adds, both through the transport's own
// formulas (bytes_per_call / forward_bytes_per_call with CallShape::kv_token_elements, time_per_call).
//
// Up-projection work per call and rank, u = mla_up_projection_flops per token, S local tokens:
//   expanded: the layer up-projects its own S tokens once: forward S u, backward 2 S u (two gradients);
//   latent:   the transport up-projects every key block it attends, W of them, in the forward and again
//             in the backward (which recomputes them), and takes both gradients there: W S u + 3 W S u.
// (a2a and hybrid: K = W/U key blocks of U*S tokens for H/U heads, the same u per block; K = 1 is
// expanded once with autograd, fwd u, bwd 2u, the expanded wire's work.)
// So the latent wire adds (4K - 3) S u FLOPs per call (K = W on allgather and ring; 0 when K = 1), at the
// cluster's rate, on the compute path (forward: K - 1 blocks more). Both wires' up-projection is given to
// the transport's time formula as compute (forward in c_fwd, backward in c_bwd), so it overlaps transfers
// exactly as attention's own per-block compute does (the ring hides a hop behind a step's compute), and
// a hidden hop still costs MlaWireQuery::contention x its transfer, as in every planned case. The
// latent wire sends kv_token_elements r + dr instead of H (dn + dr + dv) values per token. The latent wins
// when the step time it gives (compute + the exposed part of its smaller
// transfers) is below the expanded wire's.
#include <cstdint>
#include <string>

#include "kernels/attention/mla_dims.hpp"
#include "kernels/transports/transport.hpp"

namespace cpbench::plan {

struct MlaWireQuery {
  MlaDims dims;
  int64_t heads = 0, cp = 1, batch = 1, local_tokens = 0, element_size = 2;
  double attention_fwd_s = 0;  // s, one rank's forward attention compute of the call (the slowest rank's)
  double bandwidth = 0;        // B/s per GPU and direction of the link the transport uses (> 0)
  double latency_s = 0;
  double flops_rate = 0;       // FLOP/s the up-projection runs at (> 0)
  // s of compute lost per s of link transfer that overlaps compute (CallCostInputs::contention): the
  // cluster's kernel-model constant with --kernel fitted, as the plan's own cases get it (cost_model.cpp
  // make_case), else 0. A ring hop hidden behind a block's compute still costs contention x its transfer.
  double contention = 0;
};

struct MlaWirePrice {
  int64_t bytes_expanded = 0, bytes_latent = 0;  // per call and rank, forward + backward
  double up_flops_extra = 0;                     // FLOPs per call the latent wire adds (fwd + bwd)
  CallTime expanded, latent;                     // the transport's time formula for each
  bool latent_wins = false;
  std::string why;  // one line: both step times, the bytes ratio and the up-projection time
};

[[nodiscard]] MlaWirePrice price_mla_wires(const Transport& transport, const MlaWireQuery& q);

}  // namespace cpbench::plan
