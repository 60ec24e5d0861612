// One rank of the multi-rank transport checks (tests/multirank/transport_test.cpp starts W of these).
//
// Every rank builds the same global q, k, v, upstream gradient and token metadata from seeded
// generators, takes its shard with the layout code (sharders/layout.hpp layout_math, the single source of
// truth for who owns which token), runs each transport forward and backward, all-gathers the
// outputs and gradients back to global order and compares them with local_attention on the global
// tensors (float64 maths). Exit 0 only if everything matches.
//
// argv[1] = mode:
//   "check"   (default) all_gather_autograd forward and backward; then every situation x dtype x
//             transport must match the reference; also checks
//             stats (bytes sent == bytes_per_call, work pairs summed over ranks == the global
//             mask's pairs of real queries, FLOPs), no NaN anywhere, exact zeros on fully masked query rows, and that the
//             two transports give bitwise the same output.
//   "planted" negative controls (W >= 2): wrong metadata or mask fed to the transports must be
//             caught by the same comparison; exits 0 only if every planted bug was detected.
//   "agree"   the transports against each other (W >= 2): for the same inputs and metadata, every pair
//             of transports (allgather, ring, a2a, hybrid-uU) must give the same out, merged LSE, dQ,
//             dK and dV, every layout, forward and backward: float64 / float32 within reordering noise,
//             bfloat16 nearly bitwise (agreement_rule below); prints the measured statistics. This is
//             what sees a state accumulated in bf16 (kernels/transports/accumulator.hpp), which the
//             float64 reference cannot tell from bf16's own rounding at small W.
#include "tests/transport_rank_common.hpp"

using namespace cpbench;
using namespace cpbench::transport_rank;

namespace {

void check_mode(const comm::Communicator& c) {
  const int W = c.size(), r = c.rank();
  check_all_gather_autograd(c);
  const auto transports = instances(W);
  uint64_t seed = 1234;
  for (const Situation& s : situations()) {
    const Global g = make_global(s, W);
    const MaskSpec mask = MaskSpec::parse(s.mask);
    const Inputs in = make_inputs(s, g, seed++);
    const at::Tensor idx = i64(g.ranks[static_cast<size_t>(r)]);
    std::vector<int64_t> order;
    for (const auto& rk : g.ranks) order.insert(order.end(), rk.begin(), rk.end());
    const Feed feed{select(g.meta, idx), select(g.meta, i64(order)), mask};
    const auto own = owners(g);
    for (at::ScalarType dtype : s.dtypes) {
      const Reference ref = reference(s, g, mask, dtype, in.q, in.k, in.v, in.grad);
      const at::Tensor dead_rows = ref.mask.any(-1).logical_not();  // [B, P]: queries with no visible key
      at::Tensor first_out;
      for (const auto& inst : transports) {
        const auto& t = inst.t;
        const std::string& tn = inst.name;
        const std::string label = s.name + " " + std::string(c10::toString(dtype)) + " " + tn + " W=" +
                                  std::to_string(W);
        if (const std::string heads = t->unsupported_heads(W, s.q_heads, s.kv_heads); !heads.empty()) {
          if (r == 0) std::cout << "skip " << label << ": " << heads << "\n";
          continue;
        }
        const std::string why = t->unsupported_reason(mask, at::TensorOptions().dtype(dtype), W);
        if (!why.empty()) {
          fail(label + ": unexpectedly unsupported: " + why);
          continue;
        }
        const Result res = run_transport(*t, c, s, g, dtype, in.q, in.k, in.v, in.grad, feed);
        const double err = worst_error(res, ref, own, tolerance(dtype), label, /*report=*/true);
        const std::pair<const char*, at::Tensor> all_results[] = {
            {"out", res.out}, {"dq", res.dq}, {"dk", res.dk}, {"dv", res.dv}};
        for (const auto& [name, x] : all_results)
          if (x.isnan().any().item<bool>() || x.isinf().any().item<bool>()) fail(label + ": " + name + " has NaN/inf");
        // Fully masked query rows: output and dQ exactly 0.
        const at::Tensor dead = dead_rows.view({s.batch, 1, g.P, 1});
        if (!res.out.masked_select(dead).eq(0).all().item<bool>()) fail(label + ": fully masked rows are not 0");
        if (!res.dq.masked_select(dead).eq(0).all().item<bool>()) fail(label + ": dq of fully masked rows is not 0");
        // Stats: bytes match the formula, work pairs add up to the global mask's real-query pairs, FLOPs
        // follow.
        const int64_t esize = static_cast<int64_t>(c10::elementSize(dtype));
        const int64_t want_bytes =
            t->bytes_per_call(CallShape{W, s.batch, s.q_heads, s.kv_heads, g.P / W, s.head_dim, esize});
        if (res.stats.bytes_sent != want_bytes)
          fail(label + ": bytes_sent " + std::to_string(res.stats.bytes_sent) + " != bytes_per_call " +
               std::to_string(want_bytes));
        // Sequence-parallel transports: each rank's queries' pairs, for all heads; head-parallel ones:
        // the pairs of its Ulysses group's queries for its H/U heads. Either way the FLOPs sum to the
        // global mask's pairs x 4 D Hq.
        at::Tensor vis = at::full({1}, res.stats.visible_pairs, at::kLong);
        at::Tensor flops = at::full({1}, res.stats.flops, at::kDouble);
        c.all_reduce_sum(vis);
        c.all_reduce_sum(flops);
        // The work rule (sharders/mask.hpp): the visible pairs whose query is a real token.
        const int64_t want_vis = ref.mask.logical_and(g.meta.valid.unsqueeze(-1)).sum().item<int64_t>();
        if (!inst.head_parallel && vis.item<int64_t>() != want_vis)
          fail(label + ": visible pairs summed over ranks " + std::to_string(vis.item<int64_t>()) + " != " +
               std::to_string(want_vis));
        if (flops.item<double>() != 4.0 * s.head_dim * s.q_heads * static_cast<double>(want_vis))
          fail(label + ": FLOPs summed over ranks " + num(flops.item<double>()) + " != 4 D Hq x the mask's pairs");
        const double want_flops = 4.0 * s.head_dim * s.q_heads * static_cast<double>(res.stats.visible_pairs);
        if (res.stats.calls != 1 || (!inst.head_parallel && res.stats.flops != want_flops))
          fail(label + ": calls/flops wrong");
        if (res.stats.compute_seconds <= 0) fail(label + ": compute_seconds not recorded");
        if (W > 1 && res.stats.comm_seconds <= 0) fail(label + ": comm_seconds not recorded");
        // Same block kernel, same merge order: the sequence-parallel transports differ only in how K/V
        // move (the head-parallel ones merge other blocks; the tolerance above judges them).
        if (inst.head_parallel) {
        } else if (!first_out.defined()) {
          first_out = res.local_out;
        } else if (!at::equal(first_out, res.local_out)) {
          fail(label + ": output differs bitwise from " + transports.front().name + "'s");
        }
        if (r == 0)
          std::cout << "ok " << label << " err " << err << " (tol " << tolerance(dtype) << ") bytes "
                    << res.stats.bytes_sent << " pairs " << res.stats.visible_pairs << "\n";
      }
    }
  }
}

// The all-to-all's negative control: a2a_rank_order takes the gathered sequence's rank order for the
// global order. With a head-tail layout that is wrong and must be caught; honest a2a passes. Heads
// that split over every W <= 4: 12 query heads, 2 kv heads (replicated at W = 3 and 4).
void planted_rank_order(const comm::Communicator& c) {
  const int W = c.size(), r = c.rank();
  Situation s;
  s.name = "head_tail/causal";
  s.layout = "head_tail";
  s.mask = "causal";
  s.q_heads = 12;
  const Global g = make_global(s, W);
  const MaskSpec mask = MaskSpec::parse(s.mask);
  const Inputs in = make_inputs(s, g, 77);
  const Reference ref = reference(s, g, mask, at::kDouble, in.q, in.k, in.v, in.grad);
  const auto own = owners(g);
  std::vector<int64_t> order;
  for (const auto& rk : g.ranks) order.insert(order.end(), rk.begin(), rk.end());
  const Feed feed{select(g.meta, i64(g.ranks[static_cast<size_t>(r)])), select(g.meta, i64(order)), mask};
  const Result honest = run_transport(*make_transport("a2a"), c, s, g, at::kDouble, in.q, in.k, in.v, in.grad, feed);
  const double ok_err = worst_error(honest, ref, own, tolerance(at::kDouble), "a2a honest", true);
  const Result bad =
      run_transport(*make_transport("a2a_rank_order"), c, s, g, at::kDouble, in.q, in.k, in.v, in.grad, feed);
  const double err = worst_error(bad, ref, own, tolerance(at::kDouble), "a2a_rank_order", false);
  if (!(err > 1e3 * tolerance(at::kDouble)))
    fail("a2a_rank_order: the rank-order positions were not caught (relative error " + num(err) + ")");
  else if (r == 0)
    std::cout << "caught a2a_rank_order: gathered rank order taken for global order (error " << err << ", honest a2a "
              << ok_err << ")\n";
}

// Each planted bug must push the error far beyond the tolerance, for every transport.
void planted_mode(const comm::Communicator& c) {
  const int W = c.size(), r = c.rank();
  if (W < 2) {
    fail("planted mode needs W >= 2 (a single rank has no remote keys to get wrong)");
    return;
  }
  Situation s;
  s.name = "contiguous/causal";
  s.layout = "contiguous";
  s.mask = "causal";
  const Global g = make_global(s, W);
  const MaskSpec mask = MaskSpec::parse(s.mask);
  const Inputs in = make_inputs(s, g, 99);
  const Reference ref = reference(s, g, mask, at::kDouble, in.q, in.k, in.v, in.grad);
  const auto own = owners(g);
  const at::Tensor idx = i64(g.ranks[static_cast<size_t>(r)]);
  std::vector<int64_t> order, reversed;
  for (const auto& rk : g.ranks) order.insert(order.end(), rk.begin(), rk.end());
  for (auto it = g.ranks.rbegin(); it != g.ranks.rend(); ++it) reversed.insert(reversed.end(), it->begin(), it->end());
  const TokenMeta local = select(g.meta, idx);
  const TokenMeta all = select(g.meta, i64(order));

  struct Plant {
    std::string name;
    Feed feed;
  };
  std::vector<Plant> plants;
  {
    // local_only: every other rank's keys hidden (what attending only the local shard computes).
    TokenMeta lo = all;
    lo.valid = all.valid.clone();
    for (int j = 0; j < W; ++j)
      if (j != r) lo.valid.narrow(1, j * (g.P / W), g.P / W).fill_(false);
    plants.push_back({"local_only (ctx.all hides remote keys)", {local, lo, mask}});
  }
  plants.push_back({"ctx.all in reversed rank order", {local, select(g.meta, i64(reversed)), mask}});
  plants.push_back({"mask full instead of causal", {local, all, MaskSpec::parse("full")}});
  {
    TokenMeta shifted = all;
    shifted.pos = all.pos + 1;  // every key one position later than it is: the diagonal disappears
    plants.push_back({"key positions off by one", {local, shifted, mask}});
  }
  for (const auto& inst : instances(W)) {
    const auto& t = inst.t;
    const std::string& tn = inst.name;
    if (!t->unsupported_heads(W, s.q_heads, s.kv_heads).empty()) continue;
    // The honest run passes, so a failure below is the plant's doing.
    const Result honest = run_transport(*t, c, s, g, at::kDouble, in.q, in.k, in.v, in.grad, {local, all, mask});
    const double ok_err = worst_error(honest, ref, own, tolerance(at::kDouble), tn + " honest", true);
    for (const auto& p : plants) {
      // A head-parallel transport reads its queries' metadata from ctx.all too: shifting every
      // position of ctx.all by one shifts queries and keys alike, which no mask can see.
      if (inst.head_parallel && p.name == "key positions off by one") continue;
      const Result res = run_transport(*t, c, s, g, at::kDouble, in.q, in.k, in.v, in.grad, p.feed);
      const double err = worst_error(res, ref, own, tolerance(at::kDouble), tn + " " + p.name, false);
      if (!(err > 1e3 * tolerance(at::kDouble)))
        fail(tn + ": planted bug '" + p.name + "' was not caught (relative error " + num(err) + ")");
      else if (r == 0)
        std::cout << "caught " << tn << ": " << p.name << " (error " << err << ", honest " << ok_err << ")\n";
    }
  }
  planted_rank_order(c);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "check";
  try {
    at::set_num_threads(1);
    auto env = comm::rank_env_from_environment();
    if (!env) {
      std::cerr << "RANK/WORLD_SIZE not set\n";
      return 2;
    }
    rank_id = env->rank;
    comm::RendezvousOptions ro;
    ro.master_addr = env->master_addr;
    ro.master_port = static_cast<std::uint16_t>(env->master_port);
    ro.rank = env->rank;
    ro.world_size = env->world_size;
    ro.timeout = std::chrono::seconds(60);
    auto store = comm::connect_store(ro);
    std::vector<int> all(static_cast<size_t>(env->world_size));
    for (int i = 0; i < env->world_size; ++i) all[static_cast<size_t>(i)] = i;
    auto pg = comm::ProcessGroup::create(store, "world", all, env->rank, comm::BackendKind::gloo, ro.timeout);
    comm::Communicator c(pg.backend_ptr());
    if (mode == "check") {
      check_mode(c);
    } else if (mode == "planted") {
      planted_mode(c);
    } else if (mode == "agree") {
      agree_mode(c);
    } else {
      std::cerr << "unknown mode " << mode << "\n";
      return 2;
    }
    c.barrier();
    if (failures == 0) std::cout << "rank " << env->rank << " of " << env->world_size << ": " << mode << " passed\n";
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank_id << ": " << e.what() << "\n";
    return 1;
  }
}

