#pragma once
// What the transport rank program's modes share (transport_rank_main.cpp: check, planted;
// transport_rank_agreement.cpp: agree): the failure count, the situations and their global tensors, the
// comparison with the float64 reference and the gathers back to global order.
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


namespace cpbench::transport_rank {

inline int failures = 0;
inline int rank_id = 0;

inline std::string num(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

inline void fail(const std::string& what) {
  std::cerr << "rank " << rank_id << ": FAIL " << what << "\n";
  ++failures;
}

inline at::Tensor i64(const std::vector<int64_t>& v) {
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

inline Global make_global(const Situation& s, int W) {
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

inline TokenMeta select(const TokenMeta& m, const at::Tensor& idx) {
  return TokenMeta{m.pos.index_select(1, idx), m.segment.index_select(1, idx), m.doc.index_select(1, idx),
                   m.valid.index_select(1, idx)};
}

inline double tolerance(at::ScalarType t) {
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
inline Compared compare(const at::Tensor& got, const at::Tensor& want, const std::vector<int64_t>& owner) {
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
inline at::Tensor gather_global(const comm::Communicator& c, const at::Tensor& local, const at::Tensor& inverse) {
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

inline Result run_transport(const Transport& t, const comm::Communicator& c, const Situation& s, const Global& g,
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

inline Reference reference(const Situation& s, const Global& g, const MaskSpec& mask, at::ScalarType dtype,
                    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& grad) {
  // The inputs rounded to the tested dtype, then float64 maths.
  at::Tensor qr = q.to(dtype).to(at::kDouble).detach().requires_grad_(true);
  at::Tensor kr = k.to(dtype).to(at::kDouble).detach().requires_grad_(true);
  at::Tensor vr = v.to(dtype).to(at::kDouble).detach().requires_grad_(true);
  at::Tensor out = local_attention(qr, kr, vr, g.meta, g.meta, mask, 1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  out.backward(grad.to(dtype).to(at::kDouble));
  return {out.detach(), qr.grad(), kr.grad(), vr.grad(), build_mask(mask, g.meta, g.meta)};
}

inline std::vector<int64_t> owners(const Global& g) {
  std::vector<int64_t> own(static_cast<size_t>(g.P));
  for (size_t r = 0; r < g.ranks.size(); ++r)
    for (int64_t p : g.ranks[r]) own[static_cast<size_t>(p)] = static_cast<int64_t>(r);
  return own;
}

// Worst relative error over out, dq, dk, dv; `report` prints each tensor's line when it exceeds tol.
inline double worst_error(const Result& res, const Reference& ref, const std::vector<int64_t>& own, double tol,
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

inline std::vector<Situation> situations() {
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

inline Inputs make_inputs(const Situation& s, const Global& g, uint64_t seed) {
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
inline void check_all_gather_autograd(const comm::Communicator& c) {
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
inline std::vector<Instance> instances(int W) {
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


// The "agree" mode (transport_rank_agreement.cpp).
void agree_mode(const comm::Communicator& c);

}  // namespace cpbench::transport_rank
