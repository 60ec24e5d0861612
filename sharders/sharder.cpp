#include "sharders/sharder.hpp"

#include <algorithm>
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

// Gathers flat input tokens into the padded stream: dims (seq_dim-1, seq_dim) = [B, S] of `t` become
// [1, P]; stream position p takes flat input index source[p], or `fill` where source[p] == -1.
at::Tensor gather_stream(const at::Tensor& t, int64_t seq_dim, const std::vector<int64_t>& source,
                         const at::Scalar& fill) {
  at::Tensor flat = t.flatten(seq_dim - 1, seq_dim);
  std::vector<int64_t> idx(source.size());
  std::vector<int64_t> holes;
  for (size_t p = 0; p < source.size(); ++p) {
    idx[p] = std::max<int64_t>(source[p], 0);
    if (source[p] < 0) holes.push_back(static_cast<int64_t>(p));
  }
  at::Tensor out = flat.index_select(seq_dim - 1, to_index_tensor(idx, t.device()));
  if (!holes.empty()) out = out.index_fill(seq_dim - 1, to_index_tensor(holes, t.device()), fill);
  return out.unsqueeze(seq_dim - 1);
}

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

Sharder::Sharder(std::shared_ptr<const Layout> layout, SharderOptions options)
    : layout_(std::move(layout)), options_(std::move(options)) {
  CP_CHECK(layout_, "Sharder needs a layout");
  CP_CHECK(options_.cp_size >= 1, layout_->name(), ": cp must be a positive integer, got ", options_.cp_size);
  CP_CHECK(options_.cp_rank >= 0 && options_.cp_rank < options_.cp_size, layout_->name(), ": rank ",
           options_.cp_rank, " is outside cp=", options_.cp_size);
}

std::string Sharder::who() const {
  return detail::concat(layout_->name(), " (cp=", options_.cp_size, ", rank ", options_.cp_rank, ")");
}

const ShardLayout& Sharder::shard_layout() const {
  CP_CHECK(shard_layout_, who(), ": no shard layout yet; call shard() first");
  return *shard_layout_;
}

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
  LayoutRequest req{options_.cp_size, P, {}, options_.mask, options_.chunk_size};
  return layout_->compute(req).ranks[static_cast<size_t>(rank)];
}

at::Tensor Sharder::local_token_global_indices(int64_t P, std::optional<int64_t> rank) const {
  return to_index_tensor(rank_indices(P, rank.value_or(options_.cp_rank)), at::kCPU);
}

at::Tensor Sharder::select_local(const at::Tensor& t, int64_t seq_dim) const {
  return t.index_select(seq_dim, to_index_tensor(rank_indices(t.size(seq_dim), options_.cp_rank), t.device()));
}

Batch Sharder::shard(const Batch& in) {
  CP_CHECK(in.input_ids.has_value() != in.inputs_embeds.has_value(), who(),
           ": batch needs exactly one of input_ids [B, S] / inputs_embeds [B, S, H], got ",
           in.input_ids ? detail::concat("both (input_ids ", shape_of(*in.input_ids), ", inputs_embeds ",
                                         shape_of(*in.inputs_embeds), ")")
                        : std::string("neither"));
  if (in.input_ids)
    CP_CHECK(in.input_ids->dim() == 2, who(), ": input_ids must be [B, S], got ", shape_of(*in.input_ids));
  else
    CP_CHECK(in.inputs_embeds->dim() == 3, who(), ": inputs_embeds must be [B, S, H], got ",
             shape_of(*in.inputs_embeds));
  const at::Tensor& prim = in.primary();
  const int64_t B = prim.size(0), S = prim.size(1);
  CP_CHECK(S >= 1 && B >= 1, who(), ": ", in.primary_key(), " ", shape_of(prim), " has no tokens");
  CP_CHECK(in.labels.has_value(), who(), ": batch needs labels [B, S] = [", B, ", ", S, "], got none");
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
  LayoutRequest req{options_.cp_size, S, {}, options_.mask, options_.chunk_size};
  if (!docs.empty() && layout_->data_dependent()) {
    // Data-dependent layouts balance the real document structure of the (single) row.
    CP_CHECK(B == 1, who(), ": a data-dependent layout over documents needs batch_size 1, got seq_lens ",
             shape_of(*in.seq_lens));
    for (const auto& d : docs) req.doc_lens.push_back(d.real);
  }
  ShardLayout sl;
  sl.global = layout_->compute(req);
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

  auto take = [&](const at::Tensor& t, int64_t seq_dim, const at::Scalar& fill) {
    return select_local(pad_rule::pad_seq(t, seq_dim, pad, fill), seq_dim);
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
  out.position_ids = select_local(pad_rule::pad_positions(pos, pos_dim, pad), pos_dim);
  for (const auto& [key, ex] : in.extras)
    out.extras[key] = ExtraBuffer{take(ex.tensor, ex.seq_dim, ex.fill.value_or(0)), ex.seq_dim, ex.fill};
  out.seq_lens = in.seq_lens;
  out.seq_lens_padded = in.seq_lens_padded;
  return out;
}

std::vector<DocSpan> Sharder::documents(const Batch& in) const {
  const at::Tensor& prim = in.primary();
  const int64_t B = prim.size(0), S = prim.size(1);
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
      if (real == kSeqLensSentinel) {
        CP_CHECK(slot == kSeqLensSentinel, who(), ": seq_lens[", b, "][", d, "] is the sentinel ", kSeqLensSentinel,
                 " but seq_lens_padded[", b, "][", d, "] = ", slot);
        continue;
      }
      CP_CHECK(real >= 1, who(), ": seq_lens[", b, "][", d, "] = ", real, " is not a document length (use ",
               kSeqLensSentinel, " for no document)");
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
  // Documents of each row: real length and slot width in the input row; without seq_lens each row
  // is one document.
  std::vector<DocSpan> docs = documents(in);
  if (!in.seq_lens)
    for (int64_t b = 0; b < B; ++b) docs.push_back({b, 0, S, S});

  LayoutRequest req{W, 0, {}, options_.mask, options_.chunk_size};
  for (const auto& d : docs) req.doc_lens.push_back(d.slot);
  ShardLayout sl;
  sl.global = layout_->compute(req);
  // The layout was asked for slot widths; GlobalLayout::cu_seqlens promises real lengths.
  sl.global.cu_seqlens.assign(1, 0);
  for (const auto& d : docs) sl.global.cu_seqlens.push_back(sl.global.cu_seqlens.back() + d.real);
  const std::vector<int64_t>& cu_pad = sl.global.cu_seqlens_padded;
  const int64_t P = sl.global.padded_seq_len;
  sl.padded_seq_len = P;
  sl.input_row_shape = std::vector<int64_t>{B, S};
  sl.documents = docs;
  sl.input_padding = input_padding(in);
  sl.streams.push_back(packed_stream(docs, sl.global.cu_seqlens, cu_pad, S,
                                     sl.input_padding.empty() ? nullptr : sl.input_padding.data()));
  const Stream& stream = sl.streams.front();
  // Where each stream position's token comes from in the input rows, and the reverse.
  sl.stream_source.assign(static_cast<size_t>(P), -1);
  std::vector<int64_t> input_pos(static_cast<size_t>(B * S), -1);
  std::vector<int64_t> new_slots, new_base;  // positions with no input token, and the slot they continue
  int64_t max_padded = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    const auto& doc = docs[d];
    const int64_t start = cu_pad[d], n = cu_pad[d + 1] - cu_pad[d];
    max_padded = std::max(max_padded, n);
    for (int64_t k = 0; k < n; ++k) {
      const auto p = static_cast<size_t>(start + k);
      if (k < doc.slot) {
        const int64_t src = doc.row * S + doc.offset + k;
        sl.stream_source[p] = src;
        input_pos[static_cast<size_t>(src)] = start + k;
      } else {
        new_slots.push_back(start + k);
        new_base.push_back(start + doc.slot - 1);
      }
    }
  }
  bool moved = P != B * S;
  for (int64_t p = 0; !moved && p < P; ++p) moved = sl.stream_source[static_cast<size_t>(p)] != p;
  if (moved) {
    at::Tensor m = at::empty({B, S}, at::kLong);
    std::copy(input_pos.begin(), input_pos.end(), m.data_ptr<int64_t>());
    sl.input_token_stream_positions = m;
  }
  // The batch's padding_mask and per-document positions, from the stream.
  at::Tensor pad_mask = at::empty({1, P}, at::kBool), doc_pos = at::empty({1, P}, at::kLong);
  for (int64_t p = 0; p < P; ++p) {
    const Stream::Token& t = stream.tokens[static_cast<size_t>(p)];
    pad_mask.data_ptr<bool>()[p] = t.valid == 0;
    doc_pos.data_ptr<int64_t>()[p] = t.pos - t.doc_lo;
  }
  const std::vector<int64_t> cu_real = sl.global.cu_seqlens;
  shard_layout_ = std::move(sl);
  const auto& src = shard_layout_->stream_source;

  auto take = [&](const at::Tensor& t, int64_t seq_dim, const at::Scalar& fill) {
    CP_CHECK(seq_dim >= 1, who(), ": thd flattens the batch dim before the sequence dim; seq_dim ", seq_dim,
             " of a tensor of shape ", shape_of(t), " has no batch dim before it");
    return select_local(gather_stream(t, seq_dim, src, fill), seq_dim);
  };
  Batch out;
  if (in.input_ids) out.input_ids = take(*in.input_ids, 1, options_.padding_token_id);
  if (in.inputs_embeds) out.inputs_embeds = take(*in.inputs_embeds, 1, 0);
  out.labels = take(*in.labels, 1, kIgnoreIndex);
  if (in.loss_mask) out.loss_mask = take(*in.loss_mask, 1, 0);
  // padding_mask: the pack layout's pad slots and the caller's padding.
  out.padding_mask = select_local(pad_mask.to(prim.device()), 1);
  // position_ids: restart at each document; given ones are kept and continue counting into new slots.
  {
    at::Tensor pos;
    int64_t pos_dim = 1;
    if (in.position_ids) {
      pos = *in.position_ids;
      pos_dim = pos.dim() == 3 ? 2 : 1;
      if (pos.dim() == 2 && pos.size(0) != B) pos = pos.expand({B, S});
      pos = gather_stream(pos, pos_dim, src, 0);
      if (!new_slots.empty()) {
        at::Tensor dst = to_index_tensor(new_slots, pos.device());
        at::Tensor base = to_index_tensor(new_base, pos.device());
        std::vector<int64_t> view(static_cast<size_t>(pos.dim()), 1);
        view[static_cast<size_t>(pos_dim)] = static_cast<int64_t>(new_slots.size());
        at::Tensor delta = (dst - base).view(view);
        pos = pos.index_copy(pos_dim, dst, pos.index_select(pos_dim, base) + delta);
      }
    } else {
      pos = doc_pos.to(prim.device());
    }
    out.position_ids = select_local(pos, pos_dim);
  }
  for (const auto& [key, ex] : in.extras)
    out.extras[key] = ExtraBuffer{take(ex.tensor, ex.seq_dim, ex.fill.value_or(0)), ex.seq_dim, ex.fill};
  out.cu_seqlens = to_index_tensor(cu_real, prim.device()).to(at::kInt);
  out.cu_seqlens_padded = to_index_tensor(shard_layout_->global.cu_seqlens_padded, prim.device()).to(at::kInt);
  out.max_seqlen = max_padded;
  return out;
}

TokenMeta Sharder::attention_meta(const Batch& local) const {
  const ShardLayout& L = shard_layout();
  const std::vector<int64_t> mine = rank_indices(L.padded_seq_len, options_.cp_rank);
  TokenMeta m;
  if (layout_->packed()) {
    // The attention consumes the THD metadata the shard returned, as Transformer Engine's kernels
    // consume cu_seqlens / cu_seqlens_padded.
    CP_CHECK(local.cu_seqlens && local.cu_seqlens_padded, who(),
             ": attention_meta needs the cu_seqlens / cu_seqlens_padded of a thd shard");
    const auto as_vector = [](const at::Tensor& t) {
      const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
      return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
    };
    const std::vector<int64_t> cu_pad = as_vector(*local.cu_seqlens_padded);
    CP_CHECK(!cu_pad.empty() && cu_pad.back() == L.padded_seq_len, who(), ": cu_seqlens_padded ", shape_str(cu_pad),
             " does not end at the padded stream length ", L.padded_seq_len);
    const Stream stream =
        packed_stream(L.documents, as_vector(*local.cu_seqlens), cu_pad, (*L.input_row_shape)[1],
                      L.input_padding.empty() ? nullptr : L.input_padding.data());
    m = stream.token_meta(mine);
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

at::Tensor Sharder::shard_token_tensor(const at::Tensor& t_in, int64_t seq_dim, std::optional<at::Scalar> fill) const {
  CP_CHECK(seq_dim >= 0 && seq_dim < t_in.dim(), who(), ": shard_token_tensor: seq_dim ", seq_dim,
           " is outside a tensor of shape ", shape_of(t_in));
  at::Tensor t = t_in;
  if (layout_->data_dependent() && !shard_layout_)
    throw Error(detail::concat(who(), ": '", layout_->name(),
                               "' is a data-dependent layout; shard_token_tensor is unavailable before the first "
                               "shard()"));
  if (shard_layout_ && shard_layout_->input_row_shape && seq_dim >= 1) {
    const auto& rows = *shard_layout_->input_row_shape;
    if (t.size(seq_dim - 1) == rows[0] && t.size(seq_dim) == rows[1] &&
        !(rows[0] == 1 && rows[1] == shard_layout_->padded_seq_len && !shard_layout_->input_token_stream_positions)) {
      if (shard_layout_->input_token_stream_positions) {
        CP_CHECK(fill.has_value(), who(), ": shard_token_tensor: a tensor of shape ", shape_of(t),
                 " in input-row coordinates [B, S] = ", shape_str(rows),
                 " needs a `fill`: this thd shard moved tokens (documents padded to a multiple of ",
                 2 * options_.cp_size, ")");
        t = gather_stream(t, seq_dim, shard_layout_->stream_source, *fill);
      } else {
        t = t.flatten(seq_dim - 1, seq_dim).unsqueeze(seq_dim - 1);
      }
    }
  }
  const int64_t n = t.size(seq_dim);
  if (shard_layout_ && n != shard_layout_->padded_seq_len) {
    const auto& L = *shard_layout_;
    if (fill && L.original_seq_len && n == *L.original_seq_len) {
      t = pad_rule::pad_seq(t, seq_dim, L.padded_seq_len - n, *fill);
    } else {
      throw Error(detail::concat(
          who(), ": shard_token_tensor: tensor of shape ", shape_of(t_in), " has length ", n, " on dim ", seq_dim,
          ", but the batch was sharded with padded_seq_len=", L.padded_seq_len,
          L.original_seq_len ? detail::concat(" (original_seq_len=", *L.original_seq_len, ")") : std::string(),
          L.input_row_shape ? detail::concat(" (input rows ", shape_str(*L.input_row_shape), ")") : std::string(),
          L.original_seq_len && !fill ? "; pass the original-length tensor with an explicit fill, or pre-pad it"
                                      : ""));
    }
  }
  return select_local(t, seq_dim).contiguous();
}

at::Tensor Sharder::gather_token_tensor(const std::vector<at::Tensor>& parts, int64_t seq_dim, bool trim,
                                        std::optional<at::Scalar> fill) const {
  CP_CHECK(static_cast<int64_t>(parts.size()) == options_.cp_size, who(), ": gather_token_tensor needs one shard per rank (",
           options_.cp_size, "), got ", parts.size());
  CP_CHECK(seq_dim >= 0 && seq_dim < parts[0].dim(), who(), ": gather_token_tensor: seq_dim ", seq_dim,
           " is outside a shard of shape ", shape_of(parts[0]));
  for (size_t r = 0; r < parts.size(); ++r)
    CP_CHECK(parts[r].sizes() == parts[0].sizes(), who(), ": gather_token_tensor: rank ", r, "'s shard ",
             shape_of(parts[r]), " differs from rank 0's ", shape_of(parts[0]));
  return restore_gathered(at::cat(parts, seq_dim), seq_dim, trim, fill);
}

at::Tensor Sharder::restore_gathered(const at::Tensor& rank_order, int64_t seq_dim, bool trim,
                                     std::optional<at::Scalar> fill) const {
  CP_CHECK(seq_dim >= 0 && seq_dim < rank_order.dim(), who(), ": gather: seq_dim ", seq_dim,
           " is outside a tensor of shape ", shape_of(rank_order));
  const int64_t n = rank_order.size(seq_dim);
  if (shard_layout_)
    CP_CHECK(n == shard_layout_->padded_seq_len, who(), ": gathered length ", n, " on dim ", seq_dim, " (shape ",
             shape_of(rank_order), ") != padded_seq_len ", shard_layout_->padded_seq_len, " of the last shard");
  // inverse[p] = where global position p sits in the rank-order concatenation.
  std::vector<int64_t> inverse(static_cast<size_t>(n), -1);
  int64_t j = 0;
  for (int64_t r = 0; r < options_.cp_size; ++r)
    for (int64_t p : rank_indices(n, r)) inverse[static_cast<size_t>(p)] = j++;
  at::Tensor full = rank_order.index_select(seq_dim, to_index_tensor(inverse, rank_order.device()));
  if (!trim) return full;

  CP_CHECK(shard_layout_, who(), ": gather with trim needs the layout of a shard() to trim to; gather with "
                                 "trim=false instead");
  const auto& L = *shard_layout_;
  if (L.input_row_shape) {
    CP_CHECK(seq_dim >= 1 && full.size(seq_dim - 1) == 1, who(), ": trim to thd input rows needs the flat stream [.., 1, ",
             n, ", ..] on dims (seq_dim-1, seq_dim), got ", shape_of(full));
    const auto& rows = *L.input_row_shape;
    at::Tensor stream = full.squeeze(seq_dim - 1);
    if (L.input_token_stream_positions) {
      const at::Tensor& pos = *L.input_token_stream_positions;
      const bool dropped = (pos < 0).any().item<bool>();
      CP_CHECK(fill.has_value() || !dropped, who(),
               ": trimming to input rows ", shape_str(rows),
               " needs a `fill` for the input pad slots this thd shard dropped");
      std::vector<int64_t> idx(static_cast<size_t>(pos.numel())), holes;
      const int64_t* pp = pos.data_ptr<int64_t>();
      for (int64_t i = 0; i < pos.numel(); ++i) {
        idx[static_cast<size_t>(i)] = std::max<int64_t>(pp[i], 0);
        if (pp[i] < 0) holes.push_back(i);
      }
      at::Tensor out = stream.index_select(seq_dim - 1, to_index_tensor(idx, full.device()));
      if (!holes.empty()) out = out.index_fill(seq_dim - 1, to_index_tensor(holes, full.device()), *fill);
      return out.unflatten(seq_dim - 1, {rows[0], rows[1]});
    }
    return stream.unflatten(seq_dim - 1, {rows[0], rows[1]});
  }
  CP_CHECK(L.original_seq_len, who(), ": no original length to trim to");
  return full.narrow(seq_dim, 0, *L.original_seq_len);
}

}  // namespace cpbench
