#include "sharders/sharder.hpp"

#include <algorithm>
#include <functional>
#include <numeric>

#include "sharders/core/check.hpp"

namespace cpbench {

const at::Tensor& Batch::primary() const {
  if (input_ids) return *input_ids;
  if (inputs_embeds) return *inputs_embeds;
  throw Error("batch: exactly one of input_ids [B, S] / inputs_embeds [B, S, H] is required, got neither");
}

const char* Batch::primary_key() const { return input_ids ? "input_ids" : "inputs_embeds"; }

namespace {

at::Tensor to_index_tensor(const std::vector<int64_t>& v, const at::Device& device) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::kLong);
  std::copy(v.begin(), v.end(), t.data_ptr<int64_t>());
  return device.is_cpu() ? t : t.to(device);
}

std::string shape_of(const at::Tensor& t) { return shape_str(t.sizes()); }

}  // namespace

namespace pad_rule {

at::Tensor pad_seq(const at::Tensor& t, int64_t seq_dim, int64_t amount, const at::Scalar& fill) {
  if (amount == 0) return t;
  std::vector<int64_t> shape = t.sizes().vec();
  shape[static_cast<size_t>(seq_dim)] = amount;
  return at::cat({t, at::full(shape, fill, t.options())}, seq_dim);
}

at::Tensor pad_positions(const at::Tensor& pos, int64_t seq_dim, int64_t amount) {
  if (amount == 0) return pos;
  const int64_t n = pos.size(seq_dim);
  at::Tensor last = pos.narrow(seq_dim, n - 1, 1);
  std::vector<int64_t> view(static_cast<size_t>(pos.dim()), 1);
  view[static_cast<size_t>(seq_dim)] = amount;
  at::Tensor steps = at::arange(1, amount + 1, pos.options()).view(view);
  return at::cat({pos, last + steps}, seq_dim);
}

}  // namespace pad_rule

namespace {

// Slice copies beat one index_select when the map has few long runs: a copy_ call costs about as much
// as copying a few dozen indexed rows.
bool few_runs(size_t runs, int64_t n) { return runs <= 4 || static_cast<int64_t>(runs) * 64 <= n; }

// Runs of equally spaced sources of src (src[j] = -1: fill), each written to consecutive outputs.
std::vector<TokenMap::Run> runs_of(const std::vector<int64_t>& src) {
  std::vector<TokenMap::Run> runs;
  for (size_t j = 0; j < src.size(); ++j) {
    const int64_t s = src[j];
    if (!runs.empty()) {
      TokenMap::Run& last = runs.back();
      if (s < 0 && last.src < 0) {
        ++last.len;
        continue;
      }
      if (s >= 0 && last.src >= 0) {
        if (last.len == 1 && s > last.src) last.step = s - last.src;
        if (s == last.src + last.len * last.step) {
          ++last.len;
          continue;
        }
      }
    }
    runs.push_back({s < 0 ? -1 : s, static_cast<int64_t>(j), 1, 1});
  }
  return runs;
}

// t's elements start, start + step, ... (n of them) on dim.
at::Tensor strided(const at::Tensor& t, int64_t dim, int64_t start, int64_t n, int64_t step) {
  return step == 1 ? t.narrow(dim, start, n) : t.slice(dim, start, start + (n - 1) * step + 1, step);
}

TokenMap make_token_map(const std::vector<int64_t>& src, const at::Device& device) {
  TokenMap m;
  m.out_len = static_cast<int64_t>(src.size());
  m.runs = runs_of(src);
  m.use_runs = few_runs(m.runs.size(), m.out_len);
  if (!m.use_runs) {
    std::vector<int64_t> idx(src.size()), holes;
    for (size_t j = 0; j < src.size(); ++j) {
      idx[j] = std::max<int64_t>(src[j], 0);
      if (src[j] < 0) holes.push_back(static_cast<int64_t>(j));
    }
    m.index = to_index_tensor(idx, device);
    if (!holes.empty()) m.holes = to_index_tensor(holes, device);
  } else {
    for (const auto& r : m.runs)
      if (r.src < 0) m.holes = at::empty({0}, at::kLong);  // marks "has holes"; runs fill them
  }
  return m;
}

std::string map_key(int coords, int64_t P, const at::Device& device) {
  return detail::concat(coords, ":", P, ":", device.str());
}

std::vector<int64_t> with_len(const at::Tensor& t, int64_t dim, int64_t n) {
  std::vector<int64_t> shape = t.sizes().vec();
  shape[static_cast<size_t>(dim)] = n;
  return shape;
}

}  // namespace

Sharder::Sharder(std::shared_ptr<const Layout> layout, SharderOptions options)
    : layout_(std::move(layout)), options_(std::move(options)) {
  CP_CHECK(layout_, "Sharder needs a layout");
  CP_CHECK(options_.cp_size >= 1, layout_->name(), ": cp must be a positive integer, got ", options_.cp_size);
  CP_CHECK(options_.cp_rank >= 0 && options_.cp_rank < options_.cp_size, layout_->name(), ": rank ",
           options_.cp_rank, " is outside cp=", options_.cp_size);
  CP_CHECK(options_.pad_multiple >= 1, layout_->name(), ": pad_multiple must be a positive integer, got ",
           options_.pad_multiple);
}

std::string Sharder::who() const {
  return detail::concat(layout_->name(), " (cp=", options_.cp_size, ", rank ", options_.cp_rank, ")");
}

const ShardLayout& Sharder::shard_layout() const {
  CP_CHECK(shard_layout_, who(), ": no shard layout yet; call shard() first");
  return *shard_layout_;
}

int64_t Sharder::unpacked_multiple() const {
  return std::lcm(layout_->pad_multiple(options_.cp_size), options_.cp_size * options_.pad_multiple);
}

int64_t Sharder::document_multiple() const { return unpacked_multiple(); }

std::vector<int64_t> Sharder::rank_indices(int64_t P, int64_t rank) const {
  CP_CHECK(rank >= 0 && rank < options_.cp_size, who(), ": rank ", rank, " is outside cp=", options_.cp_size);
  if (shard_layout_ && shard_layout_->padded_seq_len == P) return shard_layout_->global.ranks[rank];
  if (layout_->data_dependent()) {
    CP_CHECK(shard_layout_, who(), ": '", layout_->name(),
             "' is a data-dependent layout; its token map arrives with the shard and is unavailable before "
             "the first shard()");
    throw Error(detail::concat(who(), ": the last shard covered a padded stream of ", shard_layout_->padded_seq_len,
                               " tokens (", shard_layout_->padded_seq_len / options_.cp_size, " local x cp ",
                               options_.cp_size, "), got padded_seq_len=", P,
                               "; the tensor does not match the batch this sharder last sharded"));
  }
  const int64_t m = layout_->pad_multiple(options_.cp_size);
  CP_CHECK(P >= 1 && P % m == 0, who(), ": padded_seq_len=", P, " is not a positive multiple of ", m,
           " (what ", layout_->name(), " pads to at cp=", options_.cp_size, ")");
  if (!closed_form_ || closed_form_->padded_seq_len != P) {
    LayoutRequest req{options_.cp_size, P, {}, options_.mask, options_.chunk_size};
    closed_form_ = layout_->compute(req);
  }
  return closed_form_->ranks[static_cast<size_t>(rank)];
}

at::Tensor Sharder::local_token_global_indices(int64_t P, std::optional<int64_t> rank) const {
  return to_index_tensor(rank_indices(P, rank.value_or(options_.cp_rank)), at::kCPU);
}

const TokenMap& Sharder::shard_map(Coords from, int64_t P, const at::Device& device) const {
  const std::string key = map_key(static_cast<int>(from), P, device);
  if (auto it = shard_maps_.find(key); it != shard_maps_.end()) return it->second;
  std::vector<int64_t> src = rank_indices(P, options_.cp_rank);
  if (from == Coords::original) {
    const int64_t S = shard_layout().original_seq_len.value();
    for (auto& p : src) p = p < S ? p : -1;
  } else if (from == Coords::rows) {
    const auto& source = shard_layout().stream_source;
    for (auto& p : src) p = source[static_cast<size_t>(p)];
  }
  return shard_maps_.emplace(key, make_token_map(src, device)).first->second;
}

const ScatterMap& Sharder::gather_map(Coords to, int64_t P, const at::Device& device) const {
  const std::string key = map_key(static_cast<int>(to), P, device);
  if (auto it = gather_maps_.find(key); it != gather_maps_.end()) return it->second;
  ScatterMap m;
  // dst of stream position p in the output coordinates (-1: not in the output).
  std::function<int64_t(int64_t)> dst_of = [](int64_t p) { return p; };
  m.out_len = P;
  if (to == Coords::original) {
    const int64_t S = shard_layout().original_seq_len.value();
    m.out_len = S;
    dst_of = [S](int64_t p) { return p < S ? p : -1; };
  } else if (to == Coords::rows) {
    const ShardLayout& L = shard_layout();
    m.out_len = (*L.input_row_shape)[0] * (*L.input_row_shape)[1];
    dst_of = [&L](int64_t p) { return L.stream_source[static_cast<size_t>(p)]; };
  }
  std::vector<uint8_t> written(static_cast<size_t>(m.out_len), 0);
  std::vector<std::vector<int64_t>> dst(static_cast<size_t>(options_.cp_size));
  size_t total_runs = 0;
  for (int64_t r = 0; r < options_.cp_size; ++r) {
    auto& d = dst[static_cast<size_t>(r)];
    for (int64_t p : rank_indices(P, r)) {
      d.push_back(dst_of(p));
      if (d.back() >= 0) written[static_cast<size_t>(d.back())] = 1;
    }
    // Runs over (local j -> dst), consecutive locals to equally spaced outputs, skipping dropped locals.
    std::vector<TokenMap::Run> runs;
    for (size_t j = 0; j < d.size(); ++j) {
      if (d[j] < 0) continue;
      const auto jj = static_cast<int64_t>(j);
      if (!runs.empty() && runs.back().src + runs.back().len == jj) {
        TokenMap::Run& last = runs.back();
        if (last.len == 1 && d[j] > last.dst) last.step = d[j] - last.dst;
        if (d[j] == last.dst + last.len * last.step) {
          ++last.len;
          continue;
        }
      }
      runs.push_back({jj, d[j], 1, 1});
    }
    total_runs += runs.size();
    m.runs.push_back(std::move(runs));
  }
  std::vector<int64_t> holes;
  for (int64_t i = 0; i < m.out_len; ++i)
    if (!written[static_cast<size_t>(i)]) holes.push_back(i);
  for (size_t k = 0; k < holes.size(); ++k) {
    if (!m.hole_runs.empty() && m.hole_runs.back().dst + m.hole_runs.back().len == holes[k])
      ++m.hole_runs.back().len;
    else
      m.hole_runs.push_back({-1, holes[k], 1, 1});
  }
  if (!holes.empty()) m.holes = to_index_tensor(holes, device);
  m.use_runs = few_runs(total_runs, m.out_len);
  if (!m.use_runs) {
    for (const auto& d : dst) {
      std::vector<int64_t> kept, to;
      for (size_t j = 0; j < d.size(); ++j)
        if (d[j] >= 0) {
          kept.push_back(static_cast<int64_t>(j));
          to.push_back(d[j]);
        }
      m.kept.push_back(kept.size() == d.size() ? at::Tensor() : to_index_tensor(kept, device));
      m.dst.push_back(to_index_tensor(to, device));
    }
  }
  return gather_maps_.emplace(key, std::move(m)).first->second;
}

at::Tensor Sharder::apply(const TokenMap& m, const at::Tensor& t, int64_t dim, const std::optional<at::Scalar>& fill,
                          const char* what) const {
  CP_CHECK(!m.holes.defined() || fill.has_value(), who(), ": ", what);
  if (!m.use_runs) {
    at::Tensor out = t.index_select(dim, m.index.device() == t.device() ? m.index : m.index.to(t.device()));
    if (m.holes.defined()) out.index_fill_(dim, m.holes, *fill);
    return out;
  }
  at::Tensor out = at::empty(with_len(t, dim, m.out_len), t.options());
  for (const auto& r : m.runs) {
    at::Tensor dst = out.narrow(dim, r.dst, r.len);
    if (r.src < 0)
      dst.fill_(*fill);
    else
      dst.copy_(strided(t, dim, r.src, r.len, r.step));
  }
  return out;
}

at::Tensor Sharder::scatter(const ScatterMap& m, const std::vector<at::Tensor>& parts, int64_t dim,
                            const std::optional<at::Scalar>& fill, const char* what) const {
  CP_CHECK(!m.holes.defined() || fill.has_value(), who(), ": ", what);
  at::Tensor out = at::empty(with_len(parts[0], dim, m.out_len), parts[0].options());
  for (size_t r = 0; r < parts.size(); ++r) {
    if (m.use_runs) {
      for (const auto& run : m.runs[r])
        strided(out, dim, run.dst, run.len, run.step).copy_(parts[r].narrow(dim, run.src, run.len));
    } else {
      const at::Tensor src = m.kept[r].defined() ? parts[r].index_select(dim, m.kept[r]) : parts[r];
      out.index_copy_(dim, m.dst[r], src);
    }
  }
  for (const auto& h : m.hole_runs) out.narrow(dim, h.dst, h.len).fill_(*fill);
  return out;
}

at::Tensor Sharder::shard_positions(const at::Tensor& pos_in, int64_t pos_dim, Coords from) const {
  const ShardLayout& L = shard_layout();
  const bool rows = from == Coords::rows;
  const at::Tensor pos = rows ? pos_in.flatten(pos_dim - 1, pos_dim) : pos_in;
  const int64_t dim = rows ? pos_dim - 1 : pos_dim;
  const TokenMap& m = shard_map(from, L.padded_seq_len, pos.device());
  at::Tensor out = apply(m, pos, dim, at::Scalar(0), "position_ids");
  if (m.holes.defined()) {
    // A new slot continues counting from the last sourced position before it (the input's last
    // position, or its document's last row-slot position).
    const int64_t S = L.original_seq_len.value_or(0);
    auto source = [&](int64_t p) { return rows ? L.stream_source[static_cast<size_t>(p)] : (p < S ? p : -1); };
    const std::vector<int64_t>& mine = L.global.ranks[static_cast<size_t>(options_.cp_rank)];
    std::vector<int64_t> hole, base, delta;
    for (size_t j = 0; j < mine.size(); ++j) {
      const int64_t p = mine[j];
      if (source(p) >= 0) continue;
      int64_t q = p;
      while (source(q) < 0) --q;
      hole.push_back(static_cast<int64_t>(j));
      base.push_back(source(q));
      delta.push_back(p - q);
    }
    std::vector<int64_t> view(static_cast<size_t>(pos.dim()), 1);
    view[static_cast<size_t>(dim)] = static_cast<int64_t>(hole.size());
    const at::Tensor d = to_index_tensor(delta, pos.device()).view(view);
    out.index_copy_(dim, to_index_tensor(hole, pos.device()),
                    pos.index_select(dim, to_index_tensor(base, pos.device())) + d);
  }
  return rows ? out.unsqueeze(pos_dim - 1) : out;
}

Batch Sharder::normalized(const Batch& in) const {
  Batch b = in;
  const int64_t B = in.primary().size(0), S = in.primary().size(1);
  if (b.attention_mask) {
    const at::Tensor& am = *b.attention_mask;
    const bool is2 = am.dim() == 2 && am.size(0) == B && am.size(1) == S;
    const bool is4 = am.dim() == 4 && am.size(0) == B && am.size(1) == 1 && am.size(2) == S && am.size(3) == S;
    CP_CHECK(is2 || is4, who(), ": attention_mask must be [B, S] = [", B, ", ", S, "] or [B, 1, S, S] = [", B, ", 1, ",
             S, ", ", S, "], got ", shape_of(am));
    if (!b.padding_mask) {
      // As the seed's convert_attention_mask_to_padding_mask: a 2-D mask marks attended tokens; a 4-D
      // mask's diagonal says whether a token attends to itself (bool: true = attend; other dtypes are
      // additive: 0 = attend).
      if (is2) {
        b.padding_mask = am.to(at::kBool).logical_not();
      } else {
        const at::Tensor diag = am.select(1, 0).diagonal(0, 1, 2);
        b.padding_mask = am.scalar_type() == at::kBool ? diag.logical_not() : diag.ne(0);
      }
    }
    b.attention_mask.reset();  // the seed pops it: attention is driven by padding / documents / mask spec
  }
  if (!b.labels && b.loss_mask) {
    b.labels = b.loss_mask;
    b.loss_mask.reset();
  }
  return b;
}

Batch Sharder::shard(const Batch& in_batch) {
  CP_CHECK(in_batch.input_ids.has_value() != in_batch.inputs_embeds.has_value(), who(),
           ": batch needs exactly one of input_ids [B, S] / inputs_embeds [B, S, H], got ",
           in_batch.input_ids ? detail::concat("both (input_ids ", shape_of(*in_batch.input_ids), ", inputs_embeds ",
                                               shape_of(*in_batch.inputs_embeds), ")")
                              : std::string("neither"));
  if (in_batch.input_ids)
    CP_CHECK(in_batch.input_ids->dim() == 2, who(), ": input_ids must be [B, S], got ", shape_of(*in_batch.input_ids));
  else
    CP_CHECK(in_batch.inputs_embeds->dim() == 3, who(), ": inputs_embeds must be [B, S, H], got ",
             shape_of(*in_batch.inputs_embeds));
  const at::Tensor& prim = in_batch.primary();
  const int64_t B = prim.size(0), S = prim.size(1);
  CP_CHECK(S >= 1 && B >= 1, who(), ": ", in_batch.primary_key(), " ", shape_of(prim), " has no tokens");
  const Batch in = normalized(in_batch);
  CP_CHECK(in.labels.has_value(), who(), ": batch needs labels [B, S] = [", B, ", ", S,
           "] (or a loss_mask to promote to labels), got none");
  auto check_bs = [&](const std::optional<at::Tensor>& t, const char* key) {
    if (!t) return;
    CP_CHECK(t->dim() == 2 && t->size(0) == B && t->size(1) == S, who(), ": ", key, " must be [B, S] = [", B,
             ", ", S, "] like ", in.primary_key(), ", got ", shape_of(*t));
  };
  check_bs(in.labels, "labels");
  check_bs(in.loss_mask, "loss_mask");
  check_bs(in.padding_mask, "padding_mask");
  if (in.position_ids) {
    const auto& p = *in.position_ids;
    const bool ok2 = p.dim() == 2 && (p.size(0) == B || p.size(0) == 1) && p.size(1) == S;
    const bool ok3 = p.dim() == 3 && p.size(1) == B && p.size(2) == S;
    CP_CHECK(ok2 || ok3, who(), ": position_ids must be [B, S] = [", B, ", ", S, "] or mRoPE [C, ", B, ", ", S,
             "], got ", shape_of(p));
  }
  for (const auto& [key, ex] : in.extras) {
    CP_CHECK(ex.seq_dim >= 0 && ex.seq_dim < ex.tensor.dim(), who(), ": extra_seq_buffers['", key,
             "']: seq_dim ", ex.seq_dim, " is outside a tensor of shape ", shape_of(ex.tensor));
    CP_CHECK(ex.tensor.size(ex.seq_dim) == S, who(), ": extra_seq_buffers['", key, "'] has length ",
             ex.tensor.size(ex.seq_dim), " on dim ", ex.seq_dim, " (shape ", shape_of(ex.tensor),
             "), but the batch sequence length is ", S);
  }
  return layout_->packed() ? shard_packed(in) : shard_unpacked(in);
}

Batch Sharder::shard_unpacked(const Batch& in) {
  const at::Tensor& prim = in.primary();
  const int64_t B = prim.size(0), S = prim.size(1);
  const std::vector<DocSpan> docs = documents(in);
  // With pad_multiple > 1 the layout is asked for the already rounded length (it pads no further).
  const int64_t seq_len = options_.pad_multiple > 1 ? layout_math::round_up(S, unpacked_multiple()) : S;
  LayoutRequest req{options_.cp_size, seq_len, {}, options_.mask, options_.chunk_size};
  if (!docs.empty() && layout_->data_dependent()) {
    // Data-dependent layouts balance the real document structure of the (single) row.
    CP_CHECK(B == 1, who(), ": a data-dependent layout over documents needs batch_size 1, got seq_lens ",
             shape_of(*in.seq_lens));
    for (const auto& d : docs) req.doc_lens.push_back(d.real);
  }
  ShardLayout sl;
  sl.global = layout_->compute(req);
  sl.global.original_seq_len = S;
  sl.original_seq_len = S;
  sl.padded_seq_len = sl.global.padded_seq_len;
  const int64_t pad = sl.padded_seq_len - S;
  // One stream per row: the rows share the layout but not their documents or padding.
  const std::vector<uint8_t> input_pad = input_padding(in);
  for (int64_t b = 0; b < B; ++b) {
    // Without seq_lens a row is one document.
    std::vector<DocSpan> row;
    if (!in.seq_lens) row.push_back({0, 0, S, S});
    for (const auto& d : docs)
      if (d.row == b) row.push_back({0, d.offset, d.real, d.slot});
    sl.streams.push_back(
        unpacked_stream(S, row, sl.padded_seq_len, input_pad.empty() ? nullptr : input_pad.data() + b * S));
  }
  shard_layout_ = std::move(sl);
  shard_maps_.clear();
  gather_maps_.clear();
  const int64_t P = shard_layout_->padded_seq_len;

  auto take = [&](const at::Tensor& t, int64_t seq_dim, const at::Scalar& fill) {
    return apply(shard_map(Coords::original, P, t.device()), t, seq_dim, fill, "shard: pad value missing");
  };
  Batch out;
  if (in.input_ids) out.input_ids = take(*in.input_ids, 1, options_.padding_token_id);
  if (in.inputs_embeds) out.inputs_embeds = take(*in.inputs_embeds, 1, 0);
  out.labels = take(*in.labels, 1, kIgnoreIndex);
  if (in.loss_mask) out.loss_mask = take(*in.loss_mask, 1, 0);
  if (in.padding_mask) {
    out.padding_mask = take(*in.padding_mask, 1, true);
  } else if (pad > 0) {
    out.padding_mask = take(at::zeros({B, S}, prim.options().dtype(at::kBool)), 1, true);
  }
  at::Tensor pos;
  int64_t pos_dim = 1;
  if (in.position_ids) {
    pos = *in.position_ids;
    pos_dim = pos.dim() == 3 ? 2 : 1;
    if (pos.dim() == 2 && pos.size(0) != B) pos = pos.expand({B, S});
  } else {
    pos = at::arange(S, prim.options().dtype(at::kLong)).unsqueeze(0).expand({B, S});
  }
  out.position_ids = shard_positions(pos, pos_dim, Coords::original);
  for (const auto& [key, ex] : in.extras)
    out.extras[key] = ExtraBuffer{take(ex.tensor, ex.seq_dim, ex.fill.value_or(0)), ex.seq_dim, ex.fill};
  out.seq_lens = in.seq_lens;
  out.seq_lens_padded = in.seq_lens_padded;
  return out;
}

std::vector<DocSpan> Sharder::documents(const Batch& in) const {
  const at::Tensor& prim = in.primary();
  const int64_t B = prim.size(0), S = prim.size(1);
  const int64_t none = options_.seq_lens_sentinel;
  CP_CHECK(!in.seq_lens_padded || in.seq_lens, who(), ": seq_lens_padded ", shape_of(*in.seq_lens_padded),
           " given without seq_lens");
  std::vector<DocSpan> docs;
  if (!in.seq_lens) return docs;
  at::Tensor lens = in.seq_lens->to(at::kCPU, at::kLong).contiguous();
  CP_CHECK(lens.dim() == 2 && lens.size(0) == B, who(), ": seq_lens must be [B, D] with B=", B, ", got ",
           shape_of(lens));
  at::Tensor slots = in.seq_lens_padded ? in.seq_lens_padded->to(at::kCPU, at::kLong).contiguous() : lens;
  CP_CHECK(slots.sizes() == lens.sizes(), who(), ": seq_lens_padded ", shape_of(slots),
           " must have the shape of seq_lens ", shape_of(lens));
  const auto L = lens.accessor<int64_t, 2>();
  const auto W = slots.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b) {
    int64_t off = 0;
    for (int64_t d = 0; d < lens.size(1); ++d) {
      const int64_t real = L[b][d], slot = W[b][d];
      if (real == none) {
        CP_CHECK(slot == none, who(), ": seq_lens[", b, "][", d, "] is the sentinel ", none,
                 " but seq_lens_padded[", b, "][", d, "] = ", slot);
        continue;
      }
      CP_CHECK(real >= 1, who(), ": seq_lens[", b, "][", d, "] = ", real, " is not a document length (use ", none,
               " for no document)");
      CP_CHECK(slot >= real, who(), ": seq_lens_padded[", b, "][", d, "] = ", slot, " is shorter than seq_lens[", b,
               "][", d, "] = ", real);
      CP_CHECK(off + slot <= S, who(), ": the documents of row ", b, " need ", off + slot, " tokens, but the row has S=",
               S, " (", in.primary_key(), " ", shape_of(prim), ")");
      docs.push_back({b, off, real, slot});
      off += slot;
    }
  }
  CP_CHECK(!docs.empty(), who(), ": seq_lens ", shape_of(lens), " holds no document");
  return docs;
}

std::vector<uint8_t> Sharder::input_padding(const Batch& in) {
  if (!in.padding_mask) return {};
  at::Tensor pm = in.padding_mask->to(at::kCPU, at::kByte).contiguous();
  return {pm.data_ptr<uint8_t>(), pm.data_ptr<uint8_t>() + pm.numel()};
}

Batch Sharder::shard_packed(const Batch& in) {
  const at::Tensor& prim = in.primary();
  const int64_t B = prim.size(0), S = prim.size(1);
  const int64_t W = options_.cp_size;
  // Rows are flattened into one stream, so an extra must carry the batch dim right before its
  // sequence dim; any other batch size would flatten into the wrong tokens (or out of range).
  for (const auto& [key, ex] : in.extras)
    CP_CHECK(ex.seq_dim >= 1 && ex.tensor.size(ex.seq_dim - 1) == B, who(), ": extra_seq_buffers['", key,
             "'] ", shape_of(ex.tensor), " with seq_dim ", ex.seq_dim, ": thd flattens [B, S] = [", B, ", ", S,
             "] into one stream, so dims (seq_dim-1, seq_dim) must be [", B, ", ", S, "]");
  const int64_t N = options_.num_chunks;
  CP_CHECK(N >= 1 && B % N == 0, who(), ": num_chunks=", N, " must divide the batch size B=", B,
           " (each chunk packs B / num_chunks rows into its own stream)");
  const int64_t rows_per_chunk = B / N;
  std::vector<DocSpan> docs = documents(in);
  if (!in.seq_lens) {
    // Each row is one document. Without a padding_mask its real tokens end where the row's right
    // padding (a run of padding_token_id up to the end) begins, as the seed derives THD padding.
    const bool from_tokens = !in.padding_mask && in.input_ids;
    at::Tensor ids = from_tokens ? in.input_ids->to(at::kCPU, at::kLong).contiguous() : at::Tensor();
    for (int64_t b = 0; b < B; ++b) {
      int64_t real = S;
      if (from_tokens) {
        const int64_t* row = ids.data_ptr<int64_t>() + b * S;
        while (real > 0 && row[real - 1] == options_.padding_token_id) --real;
        for (int64_t i = 0; i < real; ++i)
          CP_CHECK(row[i] != options_.padding_token_id, who(), ": padding_token_id=", options_.padding_token_id,
                   " also occurs as content (input_ids[", b, "][", i, "], before the row's right padding at ", real,
                   "); without seq_lens thd takes padding from the tokens, so pass a padding_mask or seq_lens");
      }
      docs.push_back({b, 0, real, S});
    }
  } else if (options_.thd_trailing == SharderOptions::ThdTrailing::fold) {
    // The seed's absorption, row by row: a row's trailing padding joins its last document; a row
    // without documents joins the previous document (contiguous with it in the flat rows).
    std::vector<int64_t> last_of_row(static_cast<size_t>(B), -1);
    for (size_t d = 0; d < docs.size(); ++d) last_of_row[static_cast<size_t>(docs[d].row)] = static_cast<int64_t>(d);
    int64_t prev = -1;
    for (int64_t b = 0; b < B; ++b) {
      if (b % rows_per_chunk == 0) prev = -1;  // chunks are separate streams
      const int64_t last = last_of_row[static_cast<size_t>(b)];
      if (last >= 0) {
        docs[static_cast<size_t>(last)].slot = S - docs[static_cast<size_t>(last)].offset;
        prev = last;
      } else if (prev >= 0) {
        docs[static_cast<size_t>(prev)].slot += S;
      }
    }
  }

  // Each document's stream slot: its row slot rounded up to the pad multiple (a 2W-aligned slot
  // keeps its tokens in place).
  LayoutRequest req{W, 0, {}, options_.mask, options_.chunk_size};
  const int64_t m = document_multiple();
  for (const auto& d : docs) req.doc_lens.push_back(layout_math::round_up(d.slot, m));
  if (N > 1) {
    // Equal chunk streams: each chunk's last document grows to the longest chunk (differences are
    // multiples of m, so alignment holds).
    std::vector<int64_t> len(static_cast<size_t>(N), 0), last(static_cast<size_t>(N), -1);
    for (size_t d = 0; d < docs.size(); ++d) {
      const auto c = static_cast<size_t>(docs[d].row / rows_per_chunk);
      len[c] += req.doc_lens[d];
      last[c] = static_cast<int64_t>(d);
    }
    const int64_t longest = *std::max_element(len.begin(), len.end());
    for (int64_t c = 0; c < N; ++c) {
      CP_CHECK(last[static_cast<size_t>(c)] >= 0, who(), ": chunk ", c, " (rows ", c * rows_per_chunk, "..",
               (c + 1) * rows_per_chunk - 1, ") of num_chunks=", N, " holds no document");
      req.doc_lens[static_cast<size_t>(last[static_cast<size_t>(c)])] += longest - len[static_cast<size_t>(c)];
    }
  }
  ShardLayout sl;
  sl.global = layout_->compute(req);
  // The layout was asked for slot widths; GlobalLayout::cu_seqlens promises real lengths.
  sl.global.cu_seqlens.assign(1, 0);
  for (const auto& d : docs) sl.global.cu_seqlens.push_back(sl.global.cu_seqlens.back() + d.real);
  const std::vector<int64_t>& cu_pad = sl.global.cu_seqlens_padded;
  const int64_t P = sl.global.padded_seq_len;
  sl.padded_seq_len = P;
  sl.input_row_shape = std::vector<int64_t>{B, S};
  sl.num_chunks = N;
  sl.documents = docs;
  sl.input_padding = input_padding(in);
  sl.streams.push_back(packed_stream(docs, sl.global.cu_seqlens, cu_pad, S,
                                     sl.input_padding.empty() ? nullptr : sl.input_padding.data()));
  // Where each stream position's token comes from in the input rows, and the reverse.
  sl.stream_source.assign(static_cast<size_t>(P), -1);
  std::vector<int64_t> input_pos(static_cast<size_t>(B * S), -1);
  int64_t max_padded = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    const auto& doc = docs[d];
    const int64_t start = cu_pad[d], n = cu_pad[d + 1] - cu_pad[d];
    max_padded = std::max(max_padded, n);
    for (int64_t k = 0; k < std::min(n, doc.slot); ++k) {
      const int64_t src = doc.row * S + doc.offset + k;
      sl.stream_source[static_cast<size_t>(start + k)] = src;
      input_pos[static_cast<size_t>(src)] = start + k;
    }
  }
  bool moved = P != B * S;
  for (int64_t p = 0; !moved && p < P; ++p) moved = sl.stream_source[static_cast<size_t>(p)] != p;
  if (moved) {
    at::Tensor pm = at::empty({B, S}, at::kLong);
    std::copy(input_pos.begin(), input_pos.end(), pm.data_ptr<int64_t>());
    sl.input_token_stream_positions = pm;
  }
  shard_layout_ = std::move(sl);
  shard_maps_.clear();
  gather_maps_.clear();
  const Stream& stream = shard_layout_->streams.front();
  const std::vector<int64_t>& mine = shard_layout_->global.ranks[static_cast<size_t>(options_.cp_rank)];
  const auto local_n = static_cast<int64_t>(mine.size());

  auto take = [&](const at::Tensor& t, int64_t seq_dim, const at::Scalar& fill) {
    CP_CHECK(seq_dim >= 1, who(), ": thd flattens the batch dim before the sequence dim; seq_dim ", seq_dim,
             " of a tensor of shape ", shape_of(t), " has no batch dim before it");
    return apply(shard_map(Coords::rows, P, t.device()), t.flatten(seq_dim - 1, seq_dim), seq_dim - 1, fill,
                 "shard: pad value missing")
        .unsqueeze(seq_dim - 1);
  };
  // [.., 1, N * T_c_local, ..] -> [.., N, T_c_local, ..]
  auto chunked = [&](const at::Tensor& t, int64_t seq_dim) {
    return N == 1 ? t : t.squeeze(seq_dim - 1).unflatten(seq_dim - 1, {N, local_n / N});
  };
  // Stream boundaries -> int32 [D + 1], or per chunk [N, D_max + 1] (each from 0, right-padded with the
  // sentinel) as the seed stacks them.
  auto per_chunk = [&](const std::vector<int64_t>& cu, const at::Device& device) {
    if (N == 1) return to_index_tensor(cu, device).to(at::kInt);
    std::vector<std::vector<int64_t>> rows(static_cast<size_t>(N));
    for (size_t d = 0; d < docs.size(); ++d) {
      auto& row = rows[static_cast<size_t>(docs[d].row / rows_per_chunk)];
      if (row.empty()) row.push_back(0);
      row.push_back(row.back() + cu[d + 1] - cu[d]);
    }
    size_t width = 0;
    for (const auto& r : rows) width = std::max(width, r.size());
    at::Tensor t = at::full({N, static_cast<int64_t>(width)}, options_.seq_lens_sentinel, at::kLong);
    for (size_t c = 0; c < rows.size(); ++c)
      std::copy(rows[c].begin(), rows[c].end(), t.data_ptr<int64_t>() + c * width);
    return t.to(device, at::kInt);
  };
  Batch out;
  if (in.input_ids) out.input_ids = chunked(take(*in.input_ids, 1, options_.padding_token_id), 1);
  if (in.inputs_embeds) out.inputs_embeds = chunked(take(*in.inputs_embeds, 1, 0), 1);
  out.labels = chunked(take(*in.labels, 1, kIgnoreIndex), 1);
  if (in.loss_mask) out.loss_mask = chunked(take(*in.loss_mask, 1, 0), 1);
  // padding_mask (the pack layout's pad slots and the caller's padding) and per-document positions of
  // this rank's tokens, from the stream.
  at::Tensor pad_mask = at::empty({1, local_n}, at::kBool), doc_pos = at::empty({1, local_n}, at::kLong);
  for (int64_t j = 0; j < local_n; ++j) {
    const Stream::Token& t = stream.tokens[static_cast<size_t>(mine[static_cast<size_t>(j)])];
    pad_mask.data_ptr<bool>()[j] = t.valid == 0;
    doc_pos.data_ptr<int64_t>()[j] = t.pos - t.doc_lo;
  }
  out.padding_mask = chunked(pad_mask.to(prim.device()), 1);
  if (in.position_ids) {
    // Given positions are kept and continue counting into new slots.
    at::Tensor pos = *in.position_ids;
    const int64_t pos_dim = pos.dim() == 3 ? 2 : 1;
    if (pos.dim() == 2 && pos.size(0) != B) pos = pos.expand({B, S});
    out.position_ids = chunked(shard_positions(pos, pos_dim, Coords::rows), pos_dim);
  } else {
    out.position_ids = chunked(doc_pos.to(prim.device()), 1);
  }
  for (const auto& [key, ex] : in.extras)
    out.extras[key] =
        ExtraBuffer{chunked(take(ex.tensor, ex.seq_dim, ex.fill.value_or(0)), ex.seq_dim), ex.seq_dim, ex.fill};
  const at::Tensor cu_padded = per_chunk(shard_layout_->global.cu_seqlens_padded, prim.device());
  const at::Tensor cu_real = per_chunk(shard_layout_->global.cu_seqlens, prim.device());
  // As the seed: under CP (W > 1) cu_seqlens holds the padded boundaries, which is what Transformer
  // Engine's THD context parallelism consumes; without CP it keeps the real ones.
  out.cu_seqlens = W > 1 ? cu_padded : cu_real;
  out.cu_seqlens_padded = cu_padded;
  out.cu_seqlens_real = cu_real;
  out.max_seqlen = max_padded;
  return out;
}

TokenMeta Sharder::attention_meta(const Batch& local) const {
  const ShardLayout& L = shard_layout();
  const std::vector<int64_t> mine = rank_indices(L.padded_seq_len, options_.cp_rank);
  TokenMeta m;
  if (layout_->packed()) {
    // The attention consumes the THD metadata the shard returned, as Transformer Engine's kernels
    // consume cu_seqlens (padded boundaries) with the real lengths beside them.
    CP_CHECK(local.cu_seqlens_real && local.cu_seqlens_padded, who(),
             ": attention_meta needs the cu_seqlens_real / cu_seqlens_padded of a thd shard");
    const auto as_vector = [](const at::Tensor& t) {
      const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
      return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
    };
    // Chunked metadata [N, D_max + 1] (each chunk from 0, sentinel-padded) -> the streams back to back.
    const int64_t N = L.num_chunks;
    const auto stream_cu = [&](const at::Tensor& t) {
      const std::vector<int64_t> v = as_vector(t);
      if (N == 1) return v;
      CP_CHECK(t.dim() == 2 && t.size(0) == N, who(), ": chunked cu_seqlens must be [num_chunks, D + 1] with num_chunks=",
               N, ", got ", shape_of(t));
      std::vector<int64_t> out{0};
      const int64_t width = t.size(1);
      int64_t base = 0;
      for (int64_t c = 0; c < N; ++c) {
        int64_t last = 0;
        for (int64_t k = 1; k < width; ++k) {
          const int64_t x = v[static_cast<size_t>(c * width + k)];
          if (x == options_.seq_lens_sentinel) break;
          out.push_back(base + x);
          last = x;
        }
        base += last;
      }
      return out;
    };
    const std::vector<int64_t> cu_pad = stream_cu(*local.cu_seqlens_padded);
    CP_CHECK(!cu_pad.empty() && cu_pad.back() == L.padded_seq_len, who(), ": cu_seqlens_padded ", shape_str(cu_pad),
             " does not end at the padded stream length ", L.padded_seq_len);
    if (local.cu_seqlens && options_.cp_size > 1)
      CP_CHECK(stream_cu(*local.cu_seqlens) == cu_pad, who(), ": cu_seqlens ", shape_of(*local.cu_seqlens),
               " must hold the padded boundaries cu_seqlens_padded ", shape_str(cu_pad));
    const Stream stream =
        packed_stream(L.documents, stream_cu(*local.cu_seqlens_real), cu_pad, (*L.input_row_shape)[1],
                      L.input_padding.empty() ? nullptr : L.input_padding.data());
    m = stream.token_meta(mine);
    if (N > 1) {
      const int64_t n = static_cast<int64_t>(mine.size()) / N;
      m = TokenMeta{m.pos.view({N, n}), m.segment.view({N, n}), m.doc.view({N, n}), m.valid.view({N, n})};
    }
  } else {
    std::vector<TokenMeta> rows;
    for (const Stream& s : L.streams) rows.push_back(s.token_meta(mine));
    const auto cat = [&](at::Tensor TokenMeta::*field) {
      std::vector<at::Tensor> parts;
      for (const auto& r : rows) parts.push_back(r.*field);
      return at::cat(parts, 0);
    };
    m = TokenMeta{cat(&TokenMeta::pos), cat(&TokenMeta::segment), cat(&TokenMeta::doc), cat(&TokenMeta::valid)};
  }
  // Which local tokens are padding: what the shard returned.
  if (local.padding_mask) {
    const at::Tensor pm = local.padding_mask->to(at::kCPU, at::kBool);
    CP_CHECK(pm.sizes().equals(m.pos.sizes()), who(), ": the local padding_mask ", shape_of(pm),
             " does not match the local tokens ", shape_of(m.pos));
    m.valid = pm.logical_not();
  }
  return m;
}

at::Tensor Sharder::shard_token_tensor(const at::Tensor& t, int64_t seq_dim, std::optional<at::Scalar> fill) const {
  CP_CHECK(seq_dim >= 0 && seq_dim < t.dim(), who(), ": shard_token_tensor: seq_dim ", seq_dim,
           " is outside a tensor of shape ", shape_of(t));
  if (layout_->data_dependent() && !shard_layout_)
    throw Error(detail::concat(who(), ": '", layout_->name(),
                               "' is a data-dependent layout; shard_token_tensor is unavailable before the first "
                               "shard()"));
  if (shard_layout_ && shard_layout_->input_row_shape && seq_dim >= 1) {
    const auto& L = *shard_layout_;
    const auto& rows = *L.input_row_shape;
    if (t.size(seq_dim - 1) == rows[0] && t.size(seq_dim) == rows[1] &&
        !(rows[0] == 1 && rows[1] == L.padded_seq_len && !L.input_token_stream_positions)) {
      const std::string what = detail::concat(
          "shard_token_tensor: a tensor of shape ", shape_of(t), " in input-row coordinates [B, S] = ",
          shape_str(rows), " needs a `fill`: this thd shard moved tokens (documents padded to a multiple of ",
          document_multiple(), ")");
      at::Tensor out = apply(shard_map(Coords::rows, L.padded_seq_len, t.device()), t.flatten(seq_dim - 1, seq_dim),
                             seq_dim - 1, fill, what.c_str());
      return L.num_chunks == 1 ? out.unsqueeze(seq_dim - 1)
                               : out.unflatten(seq_dim - 1, {L.num_chunks, out.size(seq_dim - 1) / L.num_chunks});
    }
  }
  const int64_t n = t.size(seq_dim);
  if (shard_layout_ && n != shard_layout_->padded_seq_len) {
    const auto& L = *shard_layout_;
    if (fill && L.original_seq_len && n == *L.original_seq_len)
      return apply(shard_map(Coords::original, L.padded_seq_len, t.device()), t, seq_dim, fill, "fill missing");
    throw Error(detail::concat(
        who(), ": shard_token_tensor: tensor of shape ", shape_of(t), " has length ", n, " on dim ", seq_dim,
        ", but the batch was sharded with padded_seq_len=", L.padded_seq_len,
        L.original_seq_len ? detail::concat(" (original_seq_len=", *L.original_seq_len, ")") : std::string(),
        L.input_row_shape ? detail::concat(" (input rows ", shape_str(*L.input_row_shape), ")") : std::string(),
        L.original_seq_len && !fill ? "; pass the original-length tensor with an explicit fill, or pre-pad it" : ""));
  }
  return apply(shard_map(Coords::padded, n, t.device()), t, seq_dim, std::nullopt, "unreachable: padded map has holes");
}

at::Tensor Sharder::gather_token_tensor(const std::vector<at::Tensor>& parts_chunked, int64_t seq_dim, bool trim,
                                        std::optional<at::Scalar> fill) const {
  // thd num_chunks > 1: a rank's [N, T_c_local] is its local stream chunk by chunk, [1, N * T_c_local].
  const int64_t N = shard_layout_ ? shard_layout_->num_chunks : 1;
  std::vector<at::Tensor> chunk_parts;
  if (N > 1) {
    for (const auto& p : parts_chunked) {
      CP_CHECK(seq_dim >= 1 && seq_dim < p.dim() && p.size(seq_dim - 1) == N, who(),
               ": gather_token_tensor: a shard of a num_chunks=", N, " thd batch is [.., ", N,
               ", T_local, ..] on dims (seq_dim-1, seq_dim), got ", shape_of(p), " with seq_dim ", seq_dim);
      chunk_parts.push_back(p.flatten(seq_dim - 1, seq_dim).unsqueeze(seq_dim - 1));
    }
  }
  const std::vector<at::Tensor>& parts_in = N > 1 ? chunk_parts : parts_chunked;
  CP_CHECK(static_cast<int64_t>(parts_in.size()) == options_.cp_size, who(),
           ": gather_token_tensor needs one shard per rank (", options_.cp_size, "), got ", parts_in.size());
  CP_CHECK(seq_dim >= 0 && seq_dim < parts_in[0].dim(), who(), ": gather_token_tensor: seq_dim ", seq_dim,
           " is outside a shard of shape ", shape_of(parts_in[0]));
  for (size_t r = 0; r < parts_in.size(); ++r)
    CP_CHECK(parts_in[r].sizes() == parts_in[0].sizes(), who(), ": gather_token_tensor: rank ", r, "'s shard ",
             shape_of(parts_in[r]), " differs from rank 0's ", shape_of(parts_in[0]));
  const int64_t n = parts_in[0].size(seq_dim) * options_.cp_size;
  if (shard_layout_)
    CP_CHECK(n == shard_layout_->padded_seq_len, who(), ": gathered length ", n, " on dim ", seq_dim, " (",
             options_.cp_size, " shards of ", shape_of(parts_in[0]), ") != padded_seq_len ",
             shard_layout_->padded_seq_len, " of the last shard");
  if (!trim) {
    at::Tensor full = scatter(gather_map(Coords::padded, n, parts_in[0].device()), parts_in, seq_dim, std::nullopt, "");
    return N == 1 ? full : full.squeeze(seq_dim - 1).unflatten(seq_dim - 1, {N, n / N});
  }
  CP_CHECK(shard_layout_, who(), ": gather with trim needs the layout of a shard() to trim to; gather with "
                                 "trim=false instead");
  const auto& L = *shard_layout_;
  if (L.input_row_shape) {
    CP_CHECK(seq_dim >= 1 && parts_in[0].size(seq_dim - 1) == 1, who(),
             ": trim to thd input rows needs the flat stream [.., 1, T, ..] on dims (seq_dim-1, seq_dim), got shards of ",
             shape_of(parts_in[0]));
    std::vector<at::Tensor> parts;
    for (const auto& p : parts_in) parts.push_back(p.squeeze(seq_dim - 1));
    const auto& rows = *L.input_row_shape;
    const std::string what = detail::concat("trimming to input rows ", shape_str(rows),
                                            " needs a `fill` for the input pad slots this thd shard dropped");
    return scatter(gather_map(Coords::rows, n, parts[0].device()), parts, seq_dim - 1, fill, what.c_str())
        .unflatten(seq_dim - 1, {rows[0], rows[1]});
  }
  CP_CHECK(L.original_seq_len, who(), ": no original length to trim to");
  return scatter(gather_map(Coords::original, n, parts_in[0].device()), parts_in, seq_dim, std::nullopt, "");
}

at::Tensor Sharder::restore_gathered(const at::Tensor& rank_order, int64_t seq_dim, bool trim,
                                     std::optional<at::Scalar> fill) const {
  CP_CHECK(seq_dim >= 0 && seq_dim < rank_order.dim(), who(), ": gather: seq_dim ", seq_dim,
           " is outside a tensor of shape ", shape_of(rank_order));
  const int64_t n = rank_order.size(seq_dim);
  const int64_t N = shard_layout_ ? shard_layout_->num_chunks : 1;  // thd chunks: [N, P / N] rows
  if (shard_layout_)
    CP_CHECK(n == shard_layout_->padded_seq_len / N, who(), ": gathered length ", n, " on dim ", seq_dim, " (shape ",
             shape_of(rank_order), ") != padded_seq_len ", shard_layout_->padded_seq_len / N, " of the last shard",
             N > 1 ? detail::concat(" (per chunk of ", N, ")") : std::string());
  CP_CHECK(n % options_.cp_size == 0, who(), ": gathered length ", n, " on dim ", seq_dim,
           " is not a multiple of cp=", options_.cp_size);
  // Views of each rank's part: the gather writes the output once, straight from the all-gather result.
  const int64_t local = n / options_.cp_size;
  std::vector<at::Tensor> parts;
  for (int64_t r = 0; r < options_.cp_size; ++r) parts.push_back(rank_order.narrow(seq_dim, r * local, local));
  return gather_token_tensor(parts, seq_dim, trim, fill);
}

}  // namespace cpbench

