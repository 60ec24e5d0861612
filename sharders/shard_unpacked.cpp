// Unpacked sharding (Sharder::shard for every layout but thd): each [B, S] row is padded on the right to
// the layout's multiple and split by the layout's index map; the rows keep their own documents and
// padding, one Stream each.
#include "sharders/core/check.hpp"
#include "sharders/sharder.hpp"

namespace cpbench {

Batch Sharder::shard_unpacked(const Batch& in) {
  const at::Tensor& prim = in.primary();
  const int64_t B = prim.size(0), S = prim.size(1);
  const std::vector<DocSpan> docs = documents(in);
  // With pad_multiple > 1 the layout is asked for the already rounded length (it pads no further).
  const int64_t seq_len = options_.pad_multiple > 1 ? layout_math::round_up(S, unpacked_multiple()) : S;
  LayoutRequest req{options_.cp_size, seq_len, {}, options_.mask, options_.chunk_size, {}};
  if (!docs.empty() && layout_->data_dependent()) {
    // Data-dependent layouts balance the real document structure: of the one row here; a batch of rows
    // is flattened and dispatched row by row (shard_rows.cpp).
    if (B > 1) return shard_rows(in);
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
  maps_.clear();
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

}  // namespace cpbench
