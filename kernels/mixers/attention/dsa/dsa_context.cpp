#include "kernels/mixers/attention/dsa/dsa_context.hpp"

#include <algorithm>

#include "kernels/comm/autograd.hpp"
#include "sharders/core/check.hpp"

namespace cpbench {

const char* to_string(DsaLoss loss) { return loss == DsaLoss::dense ? "dense" : "sparse"; }
const char* to_string(DsaIndexerKind kind) { return kind == DsaIndexerKind::full ? "full" : "shared"; }

namespace {

std::shared_ptr<DsaStepContext> base_context(const AttentionConfig& config, at::ScalarType dtype) {
  auto ctx = std::make_shared<DsaStepContext>();
  ctx->config = config.dsa;
  ctx->dims.mla = config.mla;
  ctx->dims.index_heads = config.dsa.index_heads;
  ctx->dims.index_head_dim = config.dsa.index_head_dim;
  ctx->dims.topk = config.dsa.topk;
  ctx->element_size = static_cast<int64_t>(c10::elementSize(dtype));
  return ctx;
}

at::Tensor valid_of(const TokenMeta& m) {
  return m.valid.defined() ? m.valid : at::ones({m.batch(), m.tokens()}, m.pos.options().dtype(at::kBool));
}

}  // namespace

std::shared_ptr<DsaStepContext> make_dsa_single_rank_context(const AttentionConfig& config, const TokenMeta& meta,
                                                             const MaskSpec& mask, at::ScalarType dtype) {
  auto ctx = base_context(config, dtype);
  ctx->batch = meta.batch();
  ctx->local_tokens = meta.tokens();
  ctx->visible = build_mask(mask, meta, meta);
  ctx->row_valid = valid_of(meta);
  ctx->loss_rows = std::max<double>(1.0, static_cast<double>(ctx->row_valid.sum().item<int64_t>()));
  return ctx;
}

std::shared_ptr<DsaStepContext> make_dsa_cp_context(const AttentionConfig& config, const CpStepInputs& in) {
  CP_CHECK(in.comm != nullptr && in.layout != nullptr, "model.attention.dsa: the CP step has no communicator or layout");
  auto ctx = base_context(config, in.dtype);
  ctx->comm = in.comm;
  ctx->nvtx = in.nvtx;
  ctx->fault = in.fault;
  ctx->world = in.comm->size();
  ctx->rank = in.comm->rank();
  const TokenMeta& all = in.all_meta;
  const int64_t W = ctx->world, S = all.tokens() / W;
  CP_CHECK(all.tokens() == W * S && static_cast<int64_t>(in.layout->ranks.size()) == W,
           "model.attention.dsa: gathered metadata of ", all.tokens(), " tokens and a layout of ",
           in.layout->ranks.size(), " ranks for W = ", W, " (rank ", ctx->rank, ")");
  ctx->batch = all.batch();
  ctx->local_tokens = S;
  const TokenMeta local = all.narrow(1, ctx->rank * S, S);
  TokenMeta keys = all;
  if (ctx->fault != kDsaFaultBufferOrder) {
    std::vector<int64_t> rank_order;
    for (const auto& r : in.layout->ranks) rank_order.insert(rank_order.end(), r.begin(), r.end());
    CP_CHECK(static_cast<int64_t>(rank_order.size()) == W * S, "model.attention.dsa: the layout's map holds ",
             rank_order.size(), " positions for ", W * S, " gathered tokens (rank ", ctx->rank, ")");
    // Rank-order column -> global order: the stream position of each column, sorted (positions are unique).
    const at::Tensor gi = at::tensor(rank_order, at::kLong);
    ctx->order = std::get<1>(at::sort(gi, /*stable=*/true, /*dim=*/0, /*descending=*/false)).to(all.pos.device());
    keys = all.index_select(1, ctx->order);
  }
  ctx->visible = build_mask(in.mask, local, keys);
  if (!in.strategy.empty()) ctx->transport = in.strategy;  // attention's strategy: the case's transport
  if (ctx->transport == "ring") {  // the ring passes' map and byte counts (dsa_ring.hpp, dsa_costs.hpp)
    kernels::dsa::DsaRing& g = ctx->ring;
    g.comm = *in.comm;
    g.local_tokens = S;
    g.nvtx = in.nvtx;
    const at::Tensor columns = at::arange(W * S, at::TensorOptions().dtype(at::kLong).device(all.pos.device()));
    // order[g] = the rank-order column of global key g; key_global is its inverse (identity: rank order kept).
    g.key_column = ctx->order.defined() ? ctx->order : columns;
    g.key_global = at::empty_like(columns).index_put_({g.key_column}, columns);
    const DsaStepContext& c = *ctx;
    const int64_t e = c.element_size;
    g.score_bytes = c.two_rounds() ? dsa_costs::ring_score_bytes(c.dims, W, c.batch, S, e) : 0;
    g.collect_bytes = dsa_costs::forward_bytes(c.dims, W, c.batch, S, e) - g.score_bytes;
    g.return_bytes = dsa_costs::backward_bytes(c.dims, W, c.batch, S, e);
  } else if (ctx->head_split()) {  // dsa_heads.hpp: the Ulysses group's queries against every key
    ctx->ulysses = ctx->transport == "hybrid" ? in.ulysses : W;
    CP_CHECK(ctx->ulysses >= 1 && W % ctx->ulysses == 0, "model.attention.dsa (", ctx->transport, "): ulysses ",
             ctx->ulysses, " does not divide W = ", W);
    const int64_t q = ctx->ulysses * S;
    ctx->visible_all = build_mask(in.mask, all.narrow(1, ctx->rank / ctx->ulysses * q, q), keys);
  }
  ctx->row_valid = valid_of(local);
  // The sequence's valid rows (every rank counts the same from the gathered metadata); the control counts
  // this rank's own: the KL averaged per rank.
  const at::Tensor counted = ctx->fault == kDsaFaultKlPerRank ? ctx->row_valid : valid_of(all);
  ctx->loss_rows = std::max<double>(1.0, static_cast<double>(counted.sum().item<int64_t>()));
  return ctx;
}

at::Tensor DsaStepContext::gather_keys(const at::Tensor& local, bool shared) const {
  CP_CHECK(local.dim() == 3 && local.size(0) == batch && local.size(1) == local_tokens, "model.attention.dsa: key side ",
           shape_str(local.sizes()), " must be [B, S, n] = [", batch, ", ", local_tokens, ", n] (rank ", rank, ")");
  if (world == 1) return local;
  const int64_t n = local.size(2);
  CP_CHECK(n == dsa_costs::wire_elements_per_token(dims, shared), "model.attention.dsa: ", n, " key-side values per token",
           shared ? " (a shared indexer layer)" : "", ", the formula says ", dsa_costs::wire_elements_per_token(dims, shared));
  const int64_t fwd = dsa_costs::forward_bytes(dims, world, batch, local_tokens, element_size, shared);
  const int64_t bwd = dsa_costs::backward_bytes(dims, world, batch, local_tokens, element_size, shared);
  // Ring: every row, in global order, collected as the blocks pass. A shared layer's latent (GLM-5's
  // indexer_types) is all-gathered on every transport: the same bytes as a ring pass (dsa_costs.hpp).
  if (transport == "ring" && !shared) {
    const at::Tensor all = at::arange(world * local_tokens, ring.key_global.options());
    if (bytes_sent) *bytes_sent += bytes_per_layer();
    return kernels::dsa::ring_collect(ring, local.contiguous(), all.unsqueeze(0).expand({batch, world * local_tokens}));
  }
  // The all-gather reports its forward, then (in the backward) its reduce-scatter: each against its formula.
  auto calls = std::make_shared<int>(0);
  comm::AllToAllObserver observer{nvtx, {}};
  const int r = rank;
  const auto check = [calls, fwd, bwd, r](int64_t bytes) {
    const bool forward = (*calls)++ == 0;
    const int64_t want = forward ? fwd : bwd;
    CP_CHECK(bytes == want, "model.attention.dsa (allgather): rank ", r, " sent ", bytes, " bytes in the ",
             forward ? "forward" : "backward", ", the formula (dsa_costs.hpp) says ", want);
  };
  observer.done = [check](int64_t bytes, double) { check(bytes); };
  observer.done_on_device = [check](int64_t bytes, const comm::DeviceTime&, const comm::DeviceTime&) { check(bytes); };
  std::vector<int> peers(static_cast<size_t>(world));
  for (int i = 0; i < world; ++i) peers[static_cast<size_t>(i)] = i;
  const auto gd = local.element_size() < 4 ? at::kFloat : local.scalar_type();
  const at::Tensor got = comm::group_all_gather_autograd(*comm, local.contiguous(), peers, gd, observer);  // [W, B, S, n]
  if (bytes_sent) *bytes_sent += fwd + bwd;
  at::Tensor keys = got.permute({1, 0, 2, 3}).reshape({batch, world * local_tokens, n});
  return order.defined() ? keys.index_select(1, order) : keys;
}

bool DsaStepContext::two_rounds() const { return transport == "ring" && config.loss == DsaLoss::sparse && world > 1; }

kernels::dsa::RingPicks DsaStepContext::ring_picks(const at::Tensor& q_idx, const at::Tensor& w,
                                                   const at::Tensor& k_local) const {
  CP_CHECK(two_rounds(), "model.attention.dsa: the two ring rounds run on ring's sparse stage only (", transport,
           ", loss ", to_string(config.loss), ", W = ", world, ")");
  return kernels::dsa::ring_topk(ring, k_local.detach().contiguous(), q_idx.detach(), w.detach(), visible,
                                 config.scoring_relu, config.topk, fault != kDsaFaultBufferOrder);
}

at::Tensor DsaStepContext::ring_rows(const at::Tensor& local, const kernels::dsa::RingPicks& picked) const {
  const at::Tensor& picks = picked.picks;
  CP_CHECK(local.dim() == 3 && local.size(0) == batch && local.size(1) == local_tokens &&
               local.size(2) == dsa_costs::wire_elements_per_token(dims) && picks.dim() == 3 &&
               picks.size(0) == batch && picks.size(1) == local_tokens,
           "model.attention.dsa (ring): key side ", shape_str(local.sizes()), " must be [", batch, ", ", local_tokens,
           ", ", dsa_costs::wire_elements_per_token(dims), "], picks ", shape_str(picks.sizes()), " [B, S, K] (rank ",
           rank, ")");
  const int64_t K = picks.size(2);
  if (bytes_sent) *bytes_sent += bytes_per_layer();
  const at::Tensor known = picked.rows.reshape({batch, local_tokens * K, picked.rows.size(3)});
  return kernels::dsa::ring_collect(ring, local.contiguous(), picks.reshape({batch, local_tokens * K}), known)
      .view({batch, local_tokens, K, local.size(2)});
}

void DsaStepContext::add_loss(const at::Tensor& layer_loss) { aux = aux.defined() ? aux + layer_loss : layer_loss; }

void DsaStepContext::add_picks(const at::Tensor& layer_picks) {
  at::Tensor p = layer_picks.detach();
  // Back to rank order (the gathered metadata's columns), so the check can name each key by its input position.
  if (order.defined())
    p = order.index_select(0, p.clamp_min(0).flatten()).view_as(p).masked_fill(p.lt(0), -1);
  // k picks per row whatever the row's length (k_eff = min(k, keys) differs between a padded CP stream and
  // the unpadded reference).
  if (p.size(2) < config.topk) p = at::constant_pad_nd(p, {0, config.topk - p.size(2)}, -1);
  picks.push_back(p);
}

at::Tensor DsaStepContext::key_picks() const { return picks.empty() ? at::Tensor() : at::cat(picks, -1); }

int64_t DsaStepContext::bytes_per_layer() const {  // allgather's and ring's alike (dsa_costs.hpp)
  if (head_split())
    return dsa_costs::head_split_bytes(dims, config.loss, world, ulysses, batch, local_tokens, element_size);
  return dsa_costs::forward_bytes(dims, world, batch, local_tokens, element_size) +
         dsa_costs::backward_bytes(dims, world, batch, local_tokens, element_size);
}

int64_t DsaStepContext::bytes_of_layers(int64_t layers) const {
  // The dsa_shared_recompute control gathers a full layer's key side on its shared layers too.
  const int64_t shared = fault == kDsaFaultSharedRecompute ? 0 : config.shared_layers();
  return (layers - shared) * bytes_per_layer() +
         shared * (dsa_costs::forward_bytes(dims, world, batch, local_tokens, element_size, true) +
                   dsa_costs::backward_bytes(dims, world, batch, local_tokens, element_size, true));
}

DsaStepContext& dsa_context(const LayerStep& step) {
  DsaStepContext* ctx = nullptr;
  if (step.contexts)
    if (const auto it = step.contexts->find(kDefaultMixer); it != step.contexts->end())
      ctx = dynamic_cast<DsaStepContext*>(it->second.get());
  CP_CHECK(ctx != nullptr, "model.attention.dsa: the step has no DSA context (the attention mixer's step context)");
  return *ctx;
}

std::vector<std::string> dsa_transports() { return {"allgather", "ring", "a2a", "hybrid"}; }
std::vector<std::string> dsa_key_side_transports() { return {"allgather", "ring"}; }

std::string dsa_unsupported_reason(const AttentionConfig& config, const std::string& transport, const MaskSpec& mask,
                                   bool sdpa_hook) {
  if (!config.dsa.enabled()) return "";
  const auto t = dsa_transports();
  if (std::find(t.begin(), t.end(), transport) == t.end())
    return transport + ": model.attention.dsa (DeepSeek Sparse Attention) runs on allgather, ring, a2a and hybrid "
                       "only";
  if (config.sinks != 0) return "model.attention.dsa does not take learned sinks (model.attention.sinks)";
  if (sdpa_hook) return "model.attention.dsa runs on the transport routing only (not through the SDPA hook)";
  if (mask.kind != MaskSpec::Kind::causal && mask.kind != MaskSpec::Kind::document)
    return "model.attention.dsa: the indexer's top-k takes causal and document masks, not " + mask.to_string();
  return "";
}

}  // namespace cpbench
