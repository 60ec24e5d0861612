// One rank of the multi-rank communication checks (tests/multirank/comm_test.cpp starts W of these).
// Reads the torchrun environment, builds a c10d Gloo group over a TCPStore, checks collectives on
// rank-addressed data, and exits 0 only if every result is exact.
//
// argv[1] = mode: "collectives" (default) or "die" (rank 1 exits before the first collective, so the
// others must fail within the timeout, not hang).
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include "kernels/comm/autograd.hpp"
#include "kernels/comm/communicator.hpp"
#include "harness/launcher/launcher.hpp"
#include "kernels/comm/process_group.hpp"

using namespace cpbench;

namespace {
int failures = 0;
void expect_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what, int rank) {
  if (!got.sizes().equals(want.sizes()) || !at::equal(got, want)) {
    std::cerr << "rank " << rank << ": " << what << " mismatch\n got  " << got << "\n want " << want << "\n";
    ++failures;
  }
}
// Rank-addressed data: element i of rank r's block is r*1000 + i (any block can be generated alone).
at::Tensor block(int r, int64_t n) { return at::arange(n, at::kDouble) + 1000.0 * r; }
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "collectives";
  try {
    auto env = comm::rank_env_from_environment();
    if (!env) {
      std::cerr << "RANK/WORLD_SIZE not set\n";
      return 2;
    }
    const int r = env->rank, W = env->world_size;
    comm::RendezvousOptions ro;
    ro.master_addr = env->master_addr;
    ro.master_port = static_cast<std::uint16_t>(env->master_port);
    ro.rank = r;
    ro.world_size = W;
    ro.timeout = std::chrono::seconds(mode == "die" ? 5 : 60);
    auto store = comm::connect_store(ro);
    std::vector<int> all(W);
    for (int i = 0; i < W; ++i) all[i] = i;
    auto pg = comm::ProcessGroup::create(store, "world", all, r, comm::BackendKind::gloo, ro.timeout);
    comm::Communicator c(pg.backend_ptr());

    if (mode == "die" && r == 1) {
      std::_Exit(3);
    }

    const int64_t n = 5;
    // all-gather: every rank gets blocks 0..W-1 in rank order.
    {
      at::Tensor got = c.all_gather(block(r, n).view({n, 1}).repeat({1, 2}));
      std::vector<at::Tensor> parts;
      for (int q = 0; q < W; ++q) parts.push_back(block(q, n).view({n, 1}).repeat({1, 2}));
      expect_equal(got, at::cat(parts, 0), "all_gather", r);
    }
    // reduce-scatter (sum): rank r receives sum over q of q's block r; q's block k = block(q, n) + 10*k.
    {
      std::vector<at::Tensor> mine;
      for (int k = 0; k < W; ++k) mine.push_back(block(r, n) + 10.0 * k);
      at::Tensor got = c.reduce_scatter_sum(at::cat(mine, 0));
      at::Tensor want = at::zeros({n}, at::kDouble);
      for (int q = 0; q < W; ++q) want += block(q, n) + 10.0 * r;
      expect_equal(got, want, "reduce_scatter", r);
    }
    // send/recv around the ring, posted together (the ring transport's pattern).
    if (W > 1) {
      at::Tensor out = block(r, n);
      at::Tensor in = at::empty({n}, at::kDouble);
      auto ex = c.post_exchange(out, (r + 1) % W, in, (r - 1 + W) % W, /*tag=*/7);
      ex.wait();
      expect_equal(in, block((r - 1 + W) % W, n), "send/recv ring", r);
      // and blocking send/recv in the other direction
      at::Tensor back = at::empty({n}, at::kDouble);
      if (r % 2 == 0) {
        c.send(block(r, n), (r - 1 + W) % W, 8);
        c.recv(back, (r + 1) % W, 8);
      } else {
        c.recv(back, (r + 1) % W, 8);
        c.send(block(r, n), (r - 1 + W) % W, 8);
      }
      expect_equal(back, block((r + 1) % W, n), "blocking send/recv", r);
    }
    // all-to-all: rank r's block q (element i = r*1000 + 100*q + i) goes to rank q; block q of the
    // result came from rank q.
    {
      const auto piece = [&](int from, int to) { return block(from, n) + 100.0 * to; };
      std::vector<at::Tensor> mine, want;
      for (int q = 0; q < W; ++q) {
        mine.push_back(piece(r, q));
        want.push_back(piece(q, r));
      }
      expect_equal(c.all_to_all(at::cat(mine, 0)), at::cat(want, 0), "all_to_all", r);
    }
    // all_to_all_autograd: sequence-parallel [B, S/W, D] -> hidden-parallel [B, S, D/W] and back is the
    // identity; the forward puts every rank's tokens in rank order; the backward is the reverse
    // all-to-all (d/dx of sum(w * a2a(x)) is w's blocks sent home).
    {
      const int64_t B = 2, S_l = 3, Dh = 2 * W;
      // global element (b, s, d) = b*10000 + s*100 + d; rank r holds s in [r*S_l, (r+1)*S_l)
      const auto global = [&](int64_t s0, int64_t ns, int64_t d0, int64_t nd) {
        return (at::arange(B, at::kDouble).view({B, 1, 1}) * 10000 +
                (at::arange(ns, at::kDouble) + s0).view({1, ns, 1}) * 100 + (at::arange(nd, at::kDouble) + d0).view({1, 1, nd}));
      };
      at::Tensor x = global(r * S_l, S_l, 0, Dh).requires_grad_(true);
      at::Tensor hp = all_to_all_autograd(c, x, 2, 1);
      expect_equal(hp.detach(), global(0, W * S_l, r * (Dh / W), Dh / W), "all_to_all_autograd forward", r);
      at::Tensor back = all_to_all_autograd(c, hp, 1, 2);
      expect_equal(back.detach(), x.detach(), "all_to_all_autograd round trip", r);
      const at::Tensor w = hp.detach() * 0.5 + 1.0;  // a weight that differs per (b, s, d)
      (hp * w).sum().backward();
      expect_equal(x.grad(), x.detach() * 0.5 + 1.0, "all_to_all_autograd backward", r);
    }
    // all-reduce
    {
      at::Tensor t = at::full({3}, static_cast<double>(r + 1), at::kDouble);
      c.all_reduce_sum(t);
      expect_equal(t, at::full({3}, W * (W + 1) / 2.0, at::kDouble), "all_reduce", r);
    }
    // a sub-group of the even ranks (CP groups inside a cp x dp world are built this way)
    {
      std::vector<int> evens;
      for (int i = 0; i < W; i += 2) evens.push_back(i);
      if (r % 2 == 0) {
        auto sub = comm::ProcessGroup::create(store, "evens", evens, r, comm::BackendKind::gloo, ro.timeout);
        comm::Communicator sc(sub.backend_ptr());
        at::Tensor got = sc.all_gather(block(r, 2));
        std::vector<at::Tensor> parts;
        for (int q : evens) parts.push_back(block(q, 2));
        expect_equal(got, at::cat(parts, 0), "sub-group all_gather", r);
      }
    }
    c.barrier();
    if (failures == 0) std::cout << "rank " << r << " of " << W << ": all collectives exact\n";
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "rank " << (std::getenv("RANK") ? std::getenv("RANK") : "?") << ": " << e.what() << "\n";
    return 1;
  }
}
