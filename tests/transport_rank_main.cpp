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
#include <ATen/ATen.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/comm/autograd.hpp"
#include "kernels/comm/communicator.hpp"
#include "harness/launcher/launcher.hpp"
#include "kernels/comm/process_group.hpp"
#include "kernels/attention/reference.hpp"
#include "kernels/transports/accumulator.hpp"
#include "kernels/transports/head_parallel.hpp"  // kv_replication
#include "kernels/transports/transport.hpp"
#include "sharders/layout.hpp"

using namespace cpbench;

namespace {

int failures = 0;
int rank_id = 0;

std::string num(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

void fail(const std::string& what) {
  std::cerr << "rank " << rank_id << ": FAIL " << what << "\n";
  ++failures;
}

at::Tensor i64(const std::vector<int64_t>& v) {
  return at::from_blob(const_cast<int64_t*>(v.data()), {static_cast<int64_t>(v.size())}, at::kLong).clone();
}

// One test situation: a layout (who owns which token), a mask, and the metadata of the global stream.
struct Situation {
  std::string name;
  std::string layout;  // contiguous | head_tail | striped | thd
  std::string mask;
  int64_t batch = 2, q_heads = 4, kv_heads = 2, head_dim = 8;
  std::vector<at::ScalarType> dtypes{at::kDouble};
  // Unpacked streams: tokens per rank. Packed (thd): real document lengths per segment; each document
  // is padded to a multiple of 2W, and a trailing all-padding document ends the stream.
  int64_t local_tokens = 8;
  std::vector<std::vector<int64_t>> segments;
  // Unpacked streams: per batch row, how many trailing positions are padding; whether position 0 is padding;
  // document lengths per batch row (empty: one document).
  std::vector<int64_t> tail_padding{0, 0};
  bool first_token_padding = false;
  std::vector<std::vector<int64_t>> docs;
};

struct Global {
  int64_t P = 0;
  TokenMeta meta;                          // [B, P]
  std::vector<std::vector<int64_t>> ranks;  // positions owned by each rank, in local order
};

Global make_global(const Situation& s, int W) {
  Global g;
  const int64_t B = s.batch;
  if (s.layout == "thd") {
    std::vector<int64_t> pos_seg, pos_doc, pos_valid, cu{0};
    const int64_t m = 2 * W;
    for (size_t seg = 0; seg < s.segments.size(); ++seg) {
      int64_t doc = 0;
      for (int64_t len : s.segments[seg]) {
        const int64_t padded = layout_math::round_up(len, m);
        for (int64_t j = 0; j < padded; ++j) {
          pos_seg.push_back(static_cast<int64_t>(seg));
          pos_doc.push_back(doc);
          pos_valid.push_back(j < len ? 1 : 0);
        }
        cu.push_back(cu.back() + padded);
        ++doc;
      }
    }
    // A document that is padding only: under the document mask its queries see no key at all.
    for (int64_t j = 0; j < m; ++j) {
      pos_seg.push_back(static_cast<int64_t>(s.segments.size()) - 1);
      pos_doc.push_back(1000);
      pos_valid.push_back(0);
    }
    cu.push_back(cu.back() + m);
    g.P = cu.back();
    for (int r = 0; r < W; ++r) g.ranks.push_back(layout_math::thd(W, cu, r));
    g.meta.pos = at::arange(g.P, at::kLong).unsqueeze(0).repeat({B, 1});
    g.meta.segment = i64(pos_seg).unsqueeze(0).repeat({B, 1});
    g.meta.doc = i64(pos_doc).unsqueeze(0).repeat({B, 1});
    g.meta.valid = i64(pos_valid).to(at::kBool).unsqueeze(0).repeat({B, 1});
    return g;
  }
  g.P = s.local_tokens * W;
  for (int r = 0; r < W; ++r) {
    if (s.layout == "contiguous") g.ranks.push_back(layout_math::contiguous(W, g.P, r));
    else if (s.layout == "head_tail") g.ranks.push_back(layout_math::head_tail(W, g.P, r));
    else if (s.layout == "striped") g.ranks.push_back(layout_math::striped(W, g.P, r));
    else throw std::runtime_error("unknown layout " + s.layout);
  }
  g.meta.pos = at::arange(g.P, at::kLong).unsqueeze(0).repeat({B, 1});
  g.meta.segment = at::zeros({B, g.P}, at::kLong);
  g.meta.doc = at::zeros({B, g.P}, at::kLong);
  g.meta.valid = at::ones({B, g.P}, at::kBool);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t pad = std::min<int64_t>(s.tail_padding.at(static_cast<size_t>(b)), g.P - 1);
    if (pad > 0) g.meta.valid[b].narrow(0, g.P - pad, pad).fill_(false);
    if (s.first_token_padding) g.meta.valid[b][0] = false;
    if (!s.docs.empty()) {
      int64_t start = 0, id = 0;
      for (int64_t len : s.docs.at(static_cast<size_t>(b))) {
        if (start >= g.P) break;
        const int64_t n = std::min(len, g.P - start);
        g.meta.doc[b].narrow(0, start, n).fill_(id++);
        start += n;
      }
      if (start < g.P) g.meta.doc[b].narrow(0, start, g.P - start).fill_(id);
    }
  }
  return g;
}

TokenMeta select(const TokenMeta& m, const at::Tensor& idx) {
  return TokenMeta{m.pos.index_select(1, idx), m.segment.index_select(1, idx), m.doc.index_select(1, idx),
                   m.valid.index_select(1, idx)};
}

double tolerance(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return 1e-10;
    case at::kFloat: return 1e-5;
    case at::kHalf: return 5e-3;
    default: return 2e-2;  // bfloat16
  }
}

struct Compared {
  double rel = 0;  // max |got - want| / max |want|
  std::string worst;
};

// Normwise relative error; names the worst element as (b, h, s, d) and the rank owning token s.
Compared compare(const at::Tensor& got, const at::Tensor& want, const std::vector<int64_t>& owner) {
  Compared c;
  const at::Tensor diff = (got.to(at::kDouble) - want).abs();
  const double scale = std::max(want.abs().max().item<double>(), 1e-300);
  const int64_t flat = diff.argmax().item<int64_t>();
  c.rel = diff.flatten()[flat].item<double>() / scale;
  if (std::isnan(c.rel) || got.isnan().any().item<bool>()) c.rel = std::numeric_limits<double>::infinity();
  const auto sz = want.sizes();
  int64_t rem = flat;
  const int64_t d = rem % sz[3];
  rem /= sz[3];
  const int64_t s = rem % sz[2];
  rem /= sz[2];
  const int64_t h = rem % sz[1];
  const int64_t b = rem / sz[1];
  std::ostringstream os;
  os << "worst at (b=" << b << ", h=" << h << ", s=" << s << ", d=" << d << ") owned by rank "
     << owner[static_cast<size_t>(s)] << ": got " << got.to(at::kDouble)[b][h][s][d].item<double>() << ", want "
     << want[b][h][s][d].item<double>();
  c.worst = os.str();
  return c;
}

// [B, H, S_local, D] on every rank -> [B, H, P, D] in global token order (float64).
at::Tensor gather_global(const comm::Communicator& c, const at::Tensor& local, const at::Tensor& inverse) {
  at::Tensor g = all_gather_autograd(c, local.detach().to(at::kDouble), 2);
  return g.index_select(2, inverse);
}

struct Result {
  at::Tensor out, dq, dk, dv;  // global order, float64
  AttentionStats stats;
  at::Tensor local_out;        // this rank's output, input dtype
};

// What one transport run is fed; a planted bug replaces one of these.
struct Feed {
  TokenMeta local, all;
  MaskSpec mask;
};

Result run_transport(const Transport& t, const comm::Communicator& c, const Situation& s, const Global& g,
                     at::ScalarType dtype, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const at::Tensor& grad, const Feed& feed) {
  const int r = c.rank();
  const at::Tensor idx = i64(g.ranks[static_cast<size_t>(r)]);
  at::Tensor ql = q.to(dtype).index_select(2, idx).detach().requires_grad_(true);
  at::Tensor kl = k.to(dtype).index_select(2, idx).detach().requires_grad_(true);
  at::Tensor vl = v.to(dtype).index_select(2, idx).detach().requires_grad_(true);
  Result res;
  AttentionContext ctx;
  ctx.comm = &c;
  ctx.mask = feed.mask;
  ctx.local = feed.local;
  ctx.all = feed.all;
  ctx.scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  ctx.stats = &res.stats;
  ctx.nvtx_prefix = "cp:test";
  std::vector<int64_t> order;  // the layout's map, as the runner hands it (head-parallel: global order)
  for (const auto& rk : g.ranks) order.insert(order.end(), rk.begin(), rk.end());
  ctx.global_index = i64(order);
  at::Tensor out = t.attend(ql, kl, vl, ctx);
  out.backward(grad.to(dtype).index_select(2, idx));
  std::vector<int64_t> inv(order.size());
  for (size_t j = 0; j < order.size(); ++j) inv[static_cast<size_t>(order[j])] = static_cast<int64_t>(j);
  const at::Tensor inverse = i64(inv);
  res.local_out = out.detach();
  res.out = gather_global(c, out, inverse);
  res.dq = gather_global(c, ql.grad(), inverse);
  res.dk = gather_global(c, kl.grad(), inverse);
  res.dv = gather_global(c, vl.grad(), inverse);
  return res;
}

struct Reference {
  at::Tensor out, dq, dk, dv, mask;
};

Reference reference(const Situation& s, const Global& g, const MaskSpec& mask, at::ScalarType dtype,
                    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& grad) {
  // The inputs rounded to the tested dtype, then float64 maths.
  at::Tensor qr = q.to(dtype).to(at::kDouble).detach().requires_grad_(true);
  at::Tensor kr = k.to(dtype).to(at::kDouble).detach().requires_grad_(true);
  at::Tensor vr = v.to(dtype).to(at::kDouble).detach().requires_grad_(true);
  at::Tensor out = local_attention(qr, kr, vr, g.meta, g.meta, mask, 1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  out.backward(grad.to(dtype).to(at::kDouble));
  return {out.detach(), qr.grad(), kr.grad(), vr.grad(), build_mask(mask, g.meta, g.meta)};
}

std::vector<int64_t> owners(const Global& g) {
  std::vector<int64_t> own(static_cast<size_t>(g.P));
  for (size_t r = 0; r < g.ranks.size(); ++r)
    for (int64_t p : g.ranks[r]) own[static_cast<size_t>(p)] = static_cast<int64_t>(r);
  return own;
}

// Worst relative error over out, dq, dk, dv; `report` prints each tensor's line when it exceeds tol.
double worst_error(const Result& res, const Reference& ref, const std::vector<int64_t>& own, double tol,
                   const std::string& label, bool report) {
  double worst = 0;
  const std::pair<const char*, std::pair<at::Tensor, at::Tensor>> items[] = {
      {"out", {res.out, ref.out}}, {"dq", {res.dq, ref.dq}}, {"dk", {res.dk, ref.dk}}, {"dv", {res.dv, ref.dv}}};
  for (const auto& [name, pair] : items) {
    const Compared c = compare(pair.first, pair.second, own);
    worst = std::max(worst, c.rel);
    if (report && !(c.rel <= tol))
      fail(label + ": " + name + " relative error " + num(c.rel) + " > " + num(tol) + "; " +
           c.worst);
  }
  return worst;
}

std::vector<Situation> situations() {
  std::vector<Situation> v;
  {
    Situation s;
    s.name = "contiguous/causal";
    s.layout = "contiguous";
    s.mask = "causal";
    v.push_back(s);
  }
  {
    Situation s;
    s.name = "head_tail/causal/padding_keys";
    s.layout = "head_tail";
    s.mask = "causal";
    s.tail_padding = {3, 5};
    s.dtypes = {at::kDouble, at::kFloat, at::kBFloat16};
    v.push_back(s);
  }
  {
    Situation s;
    s.name = "striped/causal/mha";
    s.layout = "striped";
    s.mask = "causal";
    s.kv_heads = 4;
    v.push_back(s);
  }
  {
    Situation s;
    s.name = "head_tail/full/padding_keys";
    s.layout = "head_tail";
    s.mask = "full";
    s.tail_padding = {2, 7};
    v.push_back(s);
  }
  {
    Situation s;
    s.name = "thd/document/segments/padding_doc";
    s.layout = "thd";
    s.mask = "document";
    s.batch = 1;
    s.segments = {{5, 11, 2}, {3, 9}};
    s.dtypes = {at::kDouble, at::kFloat, at::kBFloat16};
    v.push_back(s);
  }
  {
    Situation s;
    s.name = "striped/sliding_window:5/first_token_padding";
    s.layout = "striped";
    s.mask = "sliding_window:5";
    s.first_token_padding = true;
    s.q_heads = 6;
    s.kv_heads = 2;
    s.dtypes = {at::kDouble, at::kFloat, at::kHalf};
    v.push_back(s);
  }
  {
    Situation s;
    s.name = "contiguous/document/docs_across_ranks";
    s.layout = "contiguous";
    s.mask = "document";
    s.docs = {{5, 9, 3}, {12, 100}};
    s.tail_padding = {0, 4};
    v.push_back(s);
  }
  {
    Situation s;
    s.name = "head_tail/sliding_window:3/padding_keys";
    s.layout = "head_tail";
    s.mask = "sliding_window:3";
    s.tail_padding = {4, 1};
    v.push_back(s);
  }
  return v;
}

struct Inputs {
  at::Tensor q, k, v, grad;
};

Inputs make_inputs(const Situation& s, const Global& g, uint64_t seed) {
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const auto o = at::TensorOptions().dtype(at::kDouble);
  Inputs in;
  in.q = at::randn({s.batch, s.q_heads, g.P, s.head_dim}, gen, o);
  in.k = at::randn({s.batch, s.kv_heads, g.P, s.head_dim}, gen, o);
  in.v = at::randn({s.batch, s.kv_heads, g.P, s.head_dim}, gen, o);
  in.grad = at::randn({s.batch, s.q_heads, g.P, s.head_dim}, gen, o);
  return in;
}

// all_gather_autograd: forward concatenates in rank order along dim; backward hands each rank the sum
// over ranks of the gradient of its block. Rank q's loss weights are rank-addressed, so the expected
// gradient is computable on every rank alone.
void check_all_gather_autograd(const comm::Communicator& c) {
  const int W = c.size(), r = c.rank();
  const auto block = [](int rank) { return at::arange(6, at::kDouble).view({2, 3}) + 100.0 * rank; };
  const auto weight = [&](int rank) { return at::arange(2 * 3 * W, at::kDouble).view({2, 3 * W}) * (rank + 1); };
  for (const int64_t dim : {1, -1, 0}) {
    const std::string label = "all_gather_autograd dim " + std::to_string(dim) + " W=" + std::to_string(W);
    at::Tensor x = block(r).requires_grad_(true);
    at::Tensor y = all_gather_autograd(c, x, dim);
    std::vector<at::Tensor> parts;
    for (int j = 0; j < W; ++j) parts.push_back(block(j));
    if (!at::equal(y.detach(), at::cat(parts, dim))) fail(label + ": forward is not the rank-order concatenation");
    if (dim == 0) {
      (y * y).sum().backward();  // d/dx_r of sum over ranks of |y|^2 = W * 2 * x_r
      if (!at::allclose(x.grad(), 2.0 * W * block(r))) fail(label + ": backward is not the summed gradient");
      continue;
    }
    (y * weight(r)).sum().backward();
    at::Tensor want = at::zeros({2, 3}, at::kDouble);
    for (int q = 0; q < W; ++q) want += weight(q).narrow(1, 3 * r, 3);
    if (!at::allclose(x.grad(), want)) fail(label + ": backward is not the reduce-scattered gradient");
  }
}

// Every transport this build registers, as configured instances for a CP group of W: the negative
// controls left out, hybrid once per Ulysses degree 1 < U < W dividing W ("hybrid-u2").
struct Instance {
  std::string name;
  std::shared_ptr<const Transport> t;
  bool head_parallel = false;  // splits heads over an all-to-all: its own block order and merge
};
std::vector<Instance> instances(int W) {
  std::vector<Instance> v;
  for (const auto& n : known_transports()) {
    if (is_negative_control_transport(n)) continue;
    if (takes_ulysses(n)) {
      for (int u = 2; u < W; ++u)
        if (W % u == 0) v.push_back({n + "-u" + std::to_string(u), make_transport(n, TransportOptions{u}), true});
    } else {
      v.push_back({n, make_transport(n), n == "a2a"});
    }
  }
  return v;
}

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

// ------------------------------------------------------------------------------ transport agreement

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
