#include "harness/planner/step/pytorch_cp.hpp"

#include <algorithm>
#include <vector>

#include "harness/planner/step/constants.hpp"
#include "kernels/attention/flops.hpp"  // kBackwardFactor
#include "sharders/core/check.hpp"
#include "sharders/mask_area.hpp"

namespace cpbench::plan::step {

namespace {

// Bytes per element of the eager fp32 ops (counted from torch 2.6's _attention.py; pytorch_cp.hpp):
constexpr double kF32 = 4;
constexpr double kMergeOps = 12 + 8 + 12;  // out - out_i, sigmoid(.) * that, out - that: fp32 read / write
constexpr double kAccumulate = 10;        // fp32 += a bf16 gradient: read 4 + 2, write 4
constexpr double kCatF32 = 8;             // torch.cat of an fp32 buffer: read 4, write 4
constexpr double kFlashBwdInternal = 14;  // FlashAttention-2's dO.O pass and fp32 dQ accumulator per dq element

struct Call {
  double fwd = 0, bwd = 0;
};

Call call(const Cluster& cl, const HeadShape& h, int64_t rows, int64_t keys, int64_t pairs, double efficiency) {
  mask_area::BlockArea b;
  b.rows = rows, b.keys = keys, b.pairs = pairs;
  const KernelModel& k = cl.kernel;
  const double f = block_forward_s(k, cl.attention_flops, h, b);
  const double work = (f - k.launch_s) / efficiency;
  return {k.launch_s + work, k.launch_s + kBackwardFactor * work};
}

}  // namespace

TorchCpLayer pytorch_cp_layer(const Cluster& cl, const TorchCpQuery& q) {
  const int64_t W = q.cp, s = q.local_tokens, c = s / 2;
  CP_CHECK(W >= 2 && s >= 2 && s % 2 == 0, "pytorch_cp_layer: W = ", W, ", s = ", s, " (W >= 2, s even)");
  const StepConstants& kc = constants();
  const HeadShape h{q.heads, q.kv_heads, q.head_dim};
  const double e = static_cast<double>(q.elem_bytes);
  const double S = static_cast<double>(s), C = static_cast<double>(c);
  const double E = static_cast<double>(q.heads * q.head_dim), K = static_cast<double>(q.kv_heads * q.head_dim);
  const double hbm = cl.kernel.hbm_bandwidth > 0 ? cl.kernel.hbm_bandwidth : 2e12;
  const double B = W <= cl.gpus_per_node ? cl.intra_bandwidth : cl.inter_bandwidth, a = cl.latency_s;
  const double kv_bytes = 2 * S * K * e;      // the flat [k, v] of one rank
  const double dkv_bytes = 2 * S * K * kF32;  // the fp32 [dk, dv] of one rank
  const double ag_s = static_cast<double>(W - 1) * (a + kv_bytes / B);
  const double hop_s = a + kv_bytes / B, dkv_hop_s = a + dkv_bytes / B;

  const double eff = kc.pytorch_cp_remote_call_efficiency;
  const Call local = call(cl, h, s, s, c * (c + 1) + c * c, 1.0);  // two triangles of c and one dense c x c
  const Call early = call(cl, h, s, c, s * c, eff);                 // i <= r: all of q x the first chunk
  const Call late = call(cl, h, c, s, c * s, eff);                  // i > r: the second chunk of q x all

  TorchCpLayer best;
  double best_step = -1;
  for (int64_t r = 0; r < W; ++r) {
    TorchCpLayer t;
    // Copies in each pass: k, v contiguous once, torch.cat([k, v]) at steps 0 .. W - 2.
    const double copies = static_cast<double>(W) * 2 * kv_bytes;
    double fwd_hbm = copies + (e + kF32) * S * E * 2;  // step 0's cast to fp32 and the result's cast back
    double bwd_hbm = copies + kF32 * (S * E + 2 * S * K)       // fp32 zeros for dq, dk, dv
                     + (kF32 + e) * (S * E + 2 * S * K)        // the casts back
                     + static_cast<double>(W) * kCatF32 * 2 * S * K  // torch.cat([dk, dv]) each step
                     + kAccumulate * (S * E + 2 * S * K)       // step 0's +=
                     + kFlashBwdInternal * S * E;              // step 0's call
    t.fwd_calls_s = local.fwd;
    t.bwd_calls_s = local.bwd;
    std::vector<double> step_fwd{local.fwd}, step_bwd{local.bwd};
    for (int64_t i = 1; i < W; ++i) {
      const bool first_chunk = i <= r;
      const Call& x = first_chunk ? early : late;
      t.fwd_calls_s += x.fwd;
      t.bwd_calls_s += x.bwd;
      step_fwd.push_back(x.fwd);
      step_bwd.push_back(x.bwd);
      const double rows = first_chunk ? S : C;
      fwd_hbm += (e + kF32 + kMergeOps) * rows * E + (first_chunk ? 0.0 : kCatF32 * S * E);
      bwd_hbm += kFlashBwdInternal * rows * E;
      if (first_chunk)  // dk, dv: the first chunk's += and a cat of each whole buffer; dq += over s rows
        bwd_hbm += 2 * (kAccumulate * C * K + kCatF32 * S * K) + kAccumulate * S * E;
      else  // dk, dv += over s rows; dq: the second chunk's += and a cat of the whole buffer
        bwd_hbm += 2 * kAccumulate * S * K + kAccumulate * C * E + kCatF32 * S * E;
    }
    t.fwd_hbm_bytes = fwd_hbm, t.bwd_hbm_bytes = bwd_hbm;
    t.fwd_hbm_s = fwd_hbm / hbm;
    t.bwd_hbm_s = bwd_hbm / hbm;
    // The K/V: all-gathered once per pass behind the local call, or one hop per step behind the previous
    // step's call.
    if (q.ring_rotate) {
      for (int64_t i = 1; i < W; ++i) {
        t.fwd_exposed_s += std::max(0.0, hop_s - step_fwd[static_cast<size_t>(i - 1)]);
        t.bwd_exposed_s += std::max(0.0, hop_s - step_bwd[static_cast<size_t>(i - 1)]);
      }
      t.bytes = 2 * static_cast<double>(W - 1) * kv_bytes;
    } else {
      t.fwd_exposed_s = std::max(0.0, ag_s - local.fwd);
      t.bwd_exposed_s = std::max(0.0, ag_s - local.bwd);
      t.bytes = 2 * static_cast<double>(W - 1) * kv_bytes;
    }
    // dk, dv: W fp32 hops, each waited after the next step's call; the last one at the end.
    for (int64_t i = 0; i < W; ++i)
      t.bwd_exposed_s += i + 1 < W ? std::max(0.0, dkv_hop_s - step_bwd[static_cast<size_t>(i + 1)]) : dkv_hop_s;
    t.bytes += static_cast<double>(W) * dkv_bytes;
    if (t.step_s() > best_step) best_step = t.step_s(), best = t;
  }
  return best;
}

}  // namespace cpbench::plan::step
