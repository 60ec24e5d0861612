// The windowed ring's and the head-parallel transports' cost numbers against hand counts and a brute-force
// second count (issue 52, section 1):
//  - window_halo's ring steps per rank (kernels/transports/window_halo.hpp steps_of): a step counts for a
//    rank when it sends at that distance OR the rank it receives from does (the exchange is posted either
//    way); hand-counted for contiguous and head-tail, and token by token for every layout and window.
//  - ring_window's peak activation bytes: each of the layers keeps the halo it received.
//  - a2a's all-to-all latency: two exchanges per pass (q, k, v in; the output back), three on MLA's latent
//    wire (q, the latent, the output).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "kernels/transports/transport.hpp"
#include "kernels/transports/window_halo.hpp"
#include "sharders/layout.hpp"
#include "sharders/registry.hpp"

namespace cpbench {
namespace {

using kernels::window_halo;
using kernels::WindowHalo;

std::vector<std::vector<int64_t>> layout_ranks(const std::string& layout, int64_t W, int64_t S) {
  LayoutRequest req;
  req.cp = W;
  req.seq_len = S;
  return make_layout(layout)->compute(req).ranks;
}

// Contiguous, W = 4, chunks of 40, window 42 (41 keys back): rank r needs all 40 keys of rank r - 1 (step 1)
// and the last key of rank r - 2 (step 2). Rank 0 only sends (steps 1, 2); rank 3 only receives (from rank 2
// at step 1, from rank 1 at step 2); rank 2 sends at step 1 and receives from rank 0 at step 2.
TEST(WindowHaloSteps, ContiguousRanksThatOnlyReceiveStillExchangeAtTheirSteps) {
  const WindowHalo h = window_halo(layout_ranks("contiguous", 4, 160), 42);
  EXPECT_EQ(h.sent[0], (std::vector<int64_t>{40, 1, 0}));
  EXPECT_EQ(h.sent[1], (std::vector<int64_t>{40, 1, 0}));
  EXPECT_EQ(h.sent[2], (std::vector<int64_t>{40, 0, 0}));
  EXPECT_EQ(h.sent[3], (std::vector<int64_t>{0, 0, 0}));
  const int64_t by_hand[4] = {2, 2, 2, 2};
  for (int r = 0; r < 4; ++r) EXPECT_EQ(h.steps_of(r), by_hand[r]) << "rank " << r;
}

// Head-tail (load_balanced), W = 4, chunks of 20, window 11: rank 0 sends its front chunk's tail to rank 1
// at step 1 and receives rank 1's back chunk 6 (chunk 7 is rank 0's) at step 3; rank 3 receives rank 2's
// front chunk at step 1 and sends its back chunk 4 to rank 2 (chunk 5) at step 3.
TEST(WindowHaloSteps, HeadTailCountsTheStepARankOnlyReceivesOn) {
  const WindowHalo h = window_halo(layout_ranks("load_balanced", 4, 160), 11);
  EXPECT_EQ(h.sent[0], (std::vector<int64_t>{10, 0, 0}));
  EXPECT_EQ(h.sent[3], (std::vector<int64_t>{0, 0, 10}));
  EXPECT_EQ(h.steps_of(0), 2) << "sends at step 1, receives at step 3";
  EXPECT_EQ(h.steps_of(3), 2) << "receives at step 1, sends at step 3";
  EXPECT_EQ(h.steps_of(1), 2);
  EXPECT_EQ(h.steps_of(2), 2);
}

// A second count, token by token: every (query, key) pair the window lets through whose key another rank
// owns puts that key on the owner -> querier wire once; a rank exchanges at step d when it sends to
// (r + d) mod W or receives from (r - d) mod W there.
TEST(WindowHaloSteps, EveryLayoutAndWindowAgreesWithATokenByTokenCount) {
  for (const std::string layout : {"contiguous", "load_balanced", "striped"})
    for (const int64_t W : {2, 3, 4, 5})
      for (const int64_t window : {1, 2, 7, 13, 29, 64, 200}) {
        const int64_t S = 24 * W;
        const auto ranks = layout_ranks(layout, W, S);
        std::map<int64_t, int> owner;
        for (int r = 0; r < W; ++r)
          for (int64_t p : ranks[static_cast<size_t>(r)]) owner[p] = r;
        std::vector<std::vector<std::set<int64_t>>> keys(static_cast<size_t>(W),
                                                         std::vector<std::set<int64_t>>(static_cast<size_t>(W)));
        for (int64_t q = 0; q < S; ++q)
          for (int64_t k = std::max<int64_t>(0, q - window + 1); k <= q; ++k) {
            const int from = owner.at(k), to = owner.at(q);
            if (from != to) keys[static_cast<size_t>(from)][static_cast<size_t>(to)].insert(k);
          }
        const auto sent = [&](int64_t from, int64_t d) {
          const int64_t to = (from + d) % W;
          return static_cast<int64_t>(keys[static_cast<size_t>(from)][static_cast<size_t>(to)].size());
        };
        const WindowHalo h = window_halo(ranks, window);
        const std::string what = layout + " W " + std::to_string(W) + " window " + std::to_string(window);
        for (int r = 0; r < W; ++r) {
          int64_t steps = 0;
          for (int64_t d = 1; d < W; ++d) {
            EXPECT_EQ(h.sent[static_cast<size_t>(r)][static_cast<size_t>(d - 1)], sent(r, d))
                << what << ": rank " << r << " step " << d;
            steps += sent(r, d) > 0 || sent((r - d + W) % W, d) > 0;
          }
          EXPECT_EQ(h.steps_of(r), steps) << what << ": rank " << r;
        }
      }
}

// ring_window's peak (transport.hpp, "Cost formulas"): layers * h_r * kvt + kv + dkv + (h_s + h_r) * dkvt.
// By hand: 2 kv heads of 16, bf16: a token's K and V are 2 * 2 * 16 * 2 = 128 B, its fp32 dK and dV 256 B.
// Six layers each keep the 50 tokens they received (6 * 50 * 128 = 38 400 B); the backward's block of 100
// local tokens, K/V and dK/dV (12 800 + 25 600 B), and the dK/dV halos sent and received (80 * 256 = 20 480 B).
TEST(WindowedRingPeak, EveryLayerKeepsTheHaloItReceived) {
  ActivationShape a;
  a.cp = 4;
  a.layers = 6;
  a.batch = 1;
  a.q_heads = 8;
  a.kv_heads = 2;
  a.local_tokens = 100;
  a.head_dim = 16;
  a.element_size = 2;
  a.halo_sent = 30;
  a.halo_received = 50;
  const auto t = make_transport("ring_window");
  EXPECT_EQ(t->peak_activation_bytes(a), 38400 + 12800 + 25600 + 20480);
  // One more layer keeps one more halo: 50 * 128 B.
  ActivationShape more = a;
  more.layers = 7;
  EXPECT_EQ(t->peak_activation_bytes(more) - t->peak_activation_bytes(a), 50 * 128);
  a.cp = 1;
  EXPECT_EQ(t->peak_activation_bytes(a), 0);
}

// a2a at W = U = 4 on a link fast enough that only latency counts: each all-to-all is U - 1 = 3 messages.
// Plain attention and MLA's expanded wire: q, k, v in and the output back per pass, 2 x 3 x 2 passes = 12
// latencies; MLA's latent wire: q, the latent (all-gathered) and the output, 3 x 3 x 2 = 18.
TEST(LatentA2aTime, ThreeExchangesPerPassOnTheLatentWireTwoOtherwise) {
  const auto a2a = make_transport("a2a");
  const double latency = 1e-3;
  for (const bool latent : {false, true}) {
    CallCostInputs in;
    in.cp = 4;
    in.c_fwd_max = 0;
    in.bandwidth = 1e30;
    in.latency_s = latency;
    CallShape call{4, 1, 8, 8, 64, 24, 2};
    call.v_head_dim = 16;
    call.kv_token_elements = latent ? 72 : 8 * (24 + 16);
    call.latent_wire = latent;
    in.call = call;
    in.fwd_bytes = static_cast<double>(a2a->forward_bytes_per_call(call));
    in.bwd_bytes = static_cast<double>(a2a->bytes_per_call(call)) - in.fwd_bytes;
    const CallTime t = a2a->time_per_call(in);
    const double want = (latent ? 3 : 2) * 3 * 2 * latency;
    EXPECT_NEAR(t.exposed_s, want, 1e-12) << (latent ? "latent" : "expanded") << " wire";
    EXPECT_NEAR(t.forward_exposed_s, want / 2, 1e-12) << (latent ? "latent" : "expanded") << " wire, forward";
  }
}

}  // namespace
}  // namespace cpbench
