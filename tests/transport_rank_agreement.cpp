// The "agree" mode of the transport rank program (transport_rank_main.cpp says what each mode does): the
// transports against each other for the same inputs and metadata.
#include "tests/transport_rank_common.hpp"

namespace cpbench::transport_rank {

namespace {


// What correct transports may differ by (measured on correct code, docs/correctness.md
// "Transport agreement"). The transports compute in the compute dtype and round the final out, dQ, dK,
// dV to the input dtype once, so two of them differ only by reordered float32 / float64 sums:
//   float64 / float32 inputs: max |a - b| <= rel * max |a| per tensor (normwise);
//   bfloat16 inputs: out, dQ, dK, dV in bf16 ulps of the element (ulp of max(|a|, |b|, 2^-10 max|a|),
//     the floor keeping elements near zero from demanding relative precision below the tensor's scale):
//     at most `max_ulp`, and at most `max_differ` of the elements not bitwise equal;
//   the merged LSE is a compute-dtype state for every input dtype: judged like float32 (or float64).
// A state rounded to bf16 per block or hop moves most elements by a bf16 ulp or more.
// One legitimate exception: a head-parallel transport that replicates kv heads (kv_replication > 1)
// returns each replica's dK/dV from another rank in bf16 (the all-to-all's dtype), rounded once there,
// and sums them: rep + 1 roundings where the others have one, i.e. each rank's partial rounded once
// before a float32 sum. Its dK/dV may then differ from another transport's by up to half an ulp per
// rounding of either side (dkv_roundings(), below), in ulps of the tensor's largest element (a replica
// is rounded at its own magnitude, which cancellation between replicas can leave far above the sum's:
// measured 0.0023 against 0 for an element of a tensor whose largest is 0.5), and the bitwise-equal
// fraction is not judged.
struct AgreementRule {
  double rel_f64 = 1e-12, rel_f32 = 2e-6;
  double max_ulp = 1;          // bf16: no element further apart than one ulp
  double max_differ = 0.01;    // bf16: fraction of elements not bitwise equal
};

// Stats of one (pair, tensor) comparison.
struct Agreement {
  double rel = 0;        // max |a - b| / max |a|
  double max_ulp = 0;    // bf16 tensors only
  double differ = 0;     // fraction of elements not bitwise equal
  double beyond_1ulp = 0;  // fraction more than one ulp apart (bf16 tensors)
  int64_t worst = 0;     // flat index of the largest difference (ulps for bf16, else absolute)
};

// bf16 ulp of |x|: 2^(floor(log2 |x|) - 7); x > 0.
at::Tensor bf16_ulp(const at::Tensor& mag) { return at::pow(2.0, at::floor(at::log2(mag)) - 7); }

// `floor`: the magnitude below which elements are judged in ulps of floor * max|a| instead of their own.
Agreement agreement(const at::Tensor& a, const at::Tensor& b, bool in_bf16, double floor) {
  Agreement g;
  // Equal infinities (the LSE of a query row that sees nothing) agree.
  const at::Tensor same = (a == b);
  const at::Tensor diff = at::where(same, at::zeros_like(a), (a - b).abs());
  const double scale = std::max(at::where(at::isinf(a), at::zeros_like(a), a).abs().max().item<double>(), 1e-300);
  g.rel = diff.max().item<double>() / scale;
  if (std::isnan(g.rel)) g.rel = std::numeric_limits<double>::infinity();
  g.differ = same.logical_not().to(at::kDouble).mean().item<double>();
  if (in_bf16) {
    const at::Tensor mag = at::maximum(at::maximum(a.abs(), b.abs()), at::full_like(a, scale * floor));
    const at::Tensor ulps = diff / bf16_ulp(mag);
    g.max_ulp = ulps.max().item<double>();
    g.beyond_1ulp = (ulps > 1.0).to(at::kDouble).mean().item<double>();
    g.worst = ulps.flatten().argmax().item<int64_t>();
  } else {
    g.worst = diff.flatten().argmax().item<int64_t>();
  }
  return g;
}

// One transport's results in global token order, float64: out, dQ, dK, dV ([B, H, P, D]) and the
// merged LSE ([B, Hq, P], from the forward's ScopedLseTap).
struct Tapped {
  Result res;
  at::Tensor lse;
};

// The LSE each rank's forward held, reassembled to [B, Hq, P] in global order. Sequence-parallel
// transports hold [B, Hq, S] of their own tokens; head-parallel ones (Ulysses degree U) [B, Hq/U, U*S]:
// rank (g, u) has heads [u*Hq/U, (u+1)*Hq/U) of its group g's tokens, in the group's global order
// (head_parallel.hpp: the gathered tokens sorted by their global index, so the diagonal is one causal
// block). `inverse`: global position p -> its position in the ranks' concatenated token lists.
at::Tensor global_lse(const comm::Communicator& c, const at::Tensor& local, int64_t ulysses, int64_t q_heads,
                      const at::Tensor& inverse) {
  const int W = c.size();
  const at::Tensor parts = all_gather_autograd(c, local.to(at::kDouble).unsqueeze(0).contiguous(), 0);  // [W, ...]
  if (ulysses <= 1) return at::cat(parts.unbind(0), 2).index_select(2, inverse);
  const int64_t U = ulysses, B = local.size(0), GS = local.size(2), S = GS / U, hs = q_heads / U;
  // Concatenated position -> global index, so each group's sorted order can be put back in rank order.
  const at::Tensor global_of =
      at::empty_like(inverse).index_put_({inverse}, at::arange(inverse.size(0), inverse.options()));
  at::Tensor full = at::empty({B, q_heads, W * S}, parts.options());
  for (int j = 0; j < W; ++j) {
    const int64_t g = j / U, u = j % U;
    // order[k]: the rank-order slot of the group's token with the k-th smallest global index.
    const at::Tensor order = std::get<1>(global_of.narrow(0, g * GS, GS).sort());
    const at::Tensor rank_order = at::empty_like(parts[j]).index_copy_(2, order, parts[j]);
    full.narrow(1, u * hs, hs).narrow(2, g * GS, GS).copy_(rank_order);
  }
  return full.index_select(2, inverse);
}

// bf16 roundings a dK/dV element of `inst` goes through at W (1, or rep + 1 with kv replication).
int dkv_roundings(const Instance& inst, int W, int64_t kv_heads) {
  if (!inst.head_parallel) return 1;
  const int64_t rep = kernels::kv_replication(kv_heads, inst.t->head_parallel_degree(W));
  return rep > 1 ? static_cast<int>(rep) + 1 : 1;
}

Tapped run_tapped(const Instance& inst, const comm::Communicator& c, const Situation& s, const Global& g,
                  at::ScalarType dtype, const Inputs& in, const Feed& feed, const at::Tensor& inverse) {
  Tapped t;
  at::Tensor lse;
  {
    kernels::ScopedLseTap tap;
    t.res = run_transport(*inst.t, c, s, g, dtype, in.q, in.k, in.v, in.grad, feed);
    if (tap.lse().size() != 1)
      throw std::runtime_error(inst.name + ": the forward tapped " + std::to_string(tap.lse().size()) +
                               " log-sum-exp tensors, expected 1");
    lse = tap.lse()[0];
  }
  const int64_t U = inst.head_parallel ? inst.t->head_parallel_degree(c.size()) : 1;
  t.lse = global_lse(c, lse, U, s.q_heads, inverse);
  return t;
}

// (b, h, s[, d]) of a flat index of a tensor of `sizes`, and the rank owning token s.
std::string unravel(int64_t flat, at::IntArrayRef sizes, const std::vector<int64_t>& owner) {
  std::vector<int64_t> idx(sizes.size());
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = flat % sizes[static_cast<size_t>(d)];
    flat /= sizes[static_cast<size_t>(d)];
  }
  std::ostringstream os;
  const char* names[] = {"b", "h", "s", "d"};
  os << "(";
  for (size_t d = 0; d < idx.size(); ++d) os << (d ? ", " : "") << names[d] << "=" << idx[d];
  os << ") owned by rank " << owner[static_cast<size_t>(idx[2])];
  return os.str();
}

std::vector<Situation> agreement_situations(int W) {
  std::vector<Situation> v;
  const auto add = [&](const std::string& name, const std::string& layout, const std::string& mask) {
    Situation s;
    s.name = name;
    s.layout = layout;
    s.mask = mask;
    s.q_heads = 2 * W;  // splits over every Ulysses degree U | W; 2 kv heads, replicated where U does not divide 2
    s.kv_heads = 2;
    s.head_dim = 16;
    s.local_tokens = 16;
    s.dtypes = {at::kDouble, at::kFloat, at::kBFloat16};
    v.push_back(s);
    return &v.back();
  };
  add("contiguous/causal", "contiguous", "causal");
  add("head_tail/causal/padding_keys", "head_tail", "causal")->tail_padding = {3, 11};
  add("striped/sliding_window:13", "striped", "sliding_window:13");
  // Longer than a chunk (8 tokens): the block between one rank's tail and another's head is partial.
  add("head_tail/sliding_window:21/padding_keys", "head_tail", "sliding_window:21")->tail_padding = {0, 6};
  Situation* d = add("head_tail/document/docs_across_ranks", "head_tail", "document");
  d->docs = {{9, 30, 5}, {40, 1000}};
  Situation* t = add("thd/document/segments", "thd", "document");
  t->batch = 1;
  t->segments = {{21, 9, 30}, {17, 4}};
  return v;
}

}  // namespace

void agree_mode(const comm::Communicator& c) {
  const int W = c.size(), r = c.rank();
  if (W < 2) {
    fail("agree mode needs W >= 2 (a world of one has nothing to reorder)");
    return;
  }
  const AgreementRule rule;
  // Every registered transport, plus hybrid over Ulysses groups of one rank from W = 3 (a ring of W
  // groups through the head-parallel path: the mesh's ring order, which plain ring does not exercise).
  auto transports = instances(W);
  if (W >= 3) transports.push_back({"hybrid-u1", make_transport("hybrid", TransportOptions{1}), true});
  // Worst over every situation and pair, per (dtype, tensor), for the summary lines.
  std::map<std::string, Agreement> worst;
  uint64_t seed = 4242;
  for (const Situation& s : agreement_situations(W)) {
    const Global g = make_global(s, W);
    const MaskSpec mask = MaskSpec::parse(s.mask);
    const Inputs in = make_inputs(s, g, seed++);
    std::vector<int64_t> order;
    for (const auto& rk : g.ranks) order.insert(order.end(), rk.begin(), rk.end());
    std::vector<int64_t> inv(order.size());
    for (size_t j = 0; j < order.size(); ++j) inv[static_cast<size_t>(order[j])] = static_cast<int64_t>(j);
    const at::Tensor inverse = i64(inv);
    const Feed feed{select(g.meta, i64(g.ranks[static_cast<size_t>(r)])), select(g.meta, i64(order)), mask};
    const auto own = owners(g);
    for (at::ScalarType dtype : s.dtypes) {
      const std::string dn = c10::toString(dtype);
      std::vector<std::pair<std::string, Tapped>> runs;
      std::vector<int> roundings;  // per run: bf16 roundings of a dK/dV element
      for (const auto& inst : transports) {
        if (!inst.t->unsupported_heads(W, s.q_heads, s.kv_heads).empty()) {
          fail(s.name + " " + inst.name + ": heads do not split: " + inst.t->unsupported_heads(W, s.q_heads, s.kv_heads));
          continue;
        }
        runs.emplace_back(inst.name, run_tapped(inst, c, s, g, dtype, in, feed, inverse));
        roundings.push_back(dkv_roundings(inst, W, s.kv_heads));
      }
      const bool bf16 = dtype == at::kBFloat16 || dtype == at::kHalf;
      for (size_t i = 0; i < runs.size(); ++i) {
        for (size_t j = i + 1; j < runs.size(); ++j) {
          const Tapped &a = runs[i].second, &b = runs[j].second;
          const std::string label = s.name + " " + dn + " " + runs[i].first + " vs " + runs[j].first + " W=" +
                                    std::to_string(W);
          const std::pair<const char*, std::pair<at::Tensor, at::Tensor>> items[] = {
              {"out", {a.res.out, b.res.out}}, {"lse", {a.lse, b.lse}}, {"dq", {a.res.dq, b.res.dq}},
              {"dk", {a.res.dk, b.res.dk}},    {"dv", {a.res.dv, b.res.dv}}};
          for (const auto& [name, pair] : items) {
            const bool is_lse = std::string(name) == "lse";
            const bool ulps = bf16 && !is_lse;  // the LSE is a compute-dtype state
            const bool dkv = std::string(name) == "dk" || std::string(name) == "dv";
            const int na = dkv ? roundings[i] : 1, nb = dkv ? roundings[j] : 1;
            // Replicas are rounded at their own magnitude, which cancellation can leave far above the
            // sum's: judged in ulps of the tensor's largest element.
            const bool replicated = na > 1 || nb > 1;
            const Agreement ag = agreement(pair.first, pair.second, ulps, replicated ? 1.0 : std::ldexp(1.0, -10));
            const double rel_bound = dtype == at::kDouble ? rule.rel_f64 : rule.rel_f32;
            const double ulp_bound = std::max(rule.max_ulp, 0.5 * (na + nb));
            std::string why;
            if (ulps) {
              if (!(ag.max_ulp <= ulp_bound)) why = "max " + num(ag.max_ulp) + " bf16 ulps > " + num(ulp_bound);
              else if (na == 1 && nb == 1 && !(ag.differ <= rule.max_differ))
                why = num(100 * ag.differ) + "% of elements differ > " + num(100 * rule.max_differ) + "%";
            } else if (!(ag.rel <= rel_bound)) {
              why = "relative difference " + num(ag.rel) + " > " + num(rel_bound);
            }
            if (!why.empty()) {
              const at::Tensor fa = pair.first.flatten(), fb = pair.second.flatten();
              fail("agree " + label + ": " + name + " " + why + "; worst at " +
                   unravel(ag.worst, pair.first.sizes(), own) + ": " + num(fa[ag.worst].item<double>()) + " vs " +
                   num(fb[ag.worst].item<double>()) + " (" + num(100 * ag.differ) + "% differ, " +
                   num(100 * ag.beyond_1ulp) + "% beyond 1 ulp)");
            }
            Agreement& w = worst[dn + " " + name + (na == 1 && nb == 1 ? "" : " (kv heads replicated)")];
            w.rel = std::max(w.rel, ag.rel);
            w.max_ulp = std::max(w.max_ulp, ag.max_ulp);
            w.differ = std::max(w.differ, ag.differ);
            w.beyond_1ulp = std::max(w.beyond_1ulp, ag.beyond_1ulp);
          }
        }
      }
    }
  }
  if (r == 0) {
    std::cout << "transport agreement W=" << W << " (" << transports.size() << " transports, every pair, "
              << agreement_situations(W).size() << " layouts/masks), worst over pairs and situations:\n";
    for (const auto& [key, w] : worst) {
      std::cout << "  agree " << key << ": max relative difference " << w.rel;
      if (key.rfind("BFloat16", 0) == 0 && key.find("lse") == std::string::npos)
        std::cout << ", max " << w.max_ulp << " bf16 ulp, " << 100 * w.differ << "% of elements differ, "
                  << 100 * w.beyond_1ulp << "% beyond 1 ulp";
      std::cout << "\n";
    }
  }
}

}  // namespace cpbench::transport_rank
