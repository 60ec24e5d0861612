// Sharding a batch of rows over one data-dependent map (Sharder::shard for workload_balanced when the
// batch has two or more rows with documents): each row is right-padded to the layout's row length and
// the rows are flattened into one stream, row b at [b * P_row, (b + 1) * P_row) as segment b; the
// layout dispatches each row's chunks on their own (sharders/workload_balanced.hpp). The local batch is
// [1, B * P_row / W], as thd's, so the token verbs, the attention metadata and the model see one
// stream of several segments, and gather with trim returns the [B, S] rows.
#include "sharders/core/check.hpp"
#include "sharders/sharder.hpp"

namespace cpbench {

Batch Sharder::shard_rows(const Batch& in) {
  const at::Tensor& prim = in.primary();
  const int64_t B = prim.size(0), S = prim.size(1);
  // Rows are flattened into one stream, so an extra must carry the batch dim right before its
  // sequence dim.
  for (const auto& [key, ex] : in.extras)
    CP_CHECK(ex.seq_dim >= 1 && ex.tensor.size(ex.seq_dim - 1) == B, who(), ": extra_seq_buffers['", key, "'] ",
             shape_str(ex.tensor.sizes()), " with seq_dim ", ex.seq_dim, ": a batch of ", B,
             " rows with documents is flattened into one stream, so dims (seq_dim-1, seq_dim) must be [", B, ", ", S,
             "]");
  const std::vector<DocSpan> docs = documents(in);
  const int64_t seq_len = options_.pad_multiple > 1 ? layout_math::round_up(S, unpacked_multiple()) : S;
  LayoutRequest req{options_.cp_size, seq_len, {}, options_.mask, options_.chunk_size, {}};
  req.rows.resize(static_cast<size_t>(B));
  for (const auto& d : docs) req.rows[static_cast<size_t>(d.row)].push_back(d.real);
  ShardLayout sl;
  sl.global = layout_->compute(req);
  CP_CHECK(sl.global.rows == B && sl.global.padded_seq_len % B == 0, who(), ": the layout returned a stream of ",
           sl.global.rows, " rows for a batch of ", B);
  const int64_t P = sl.global.padded_seq_len, row_len = P / B;
  sl.global.original_seq_len = S;
  sl.padded_seq_len = P;
  sl.input_row_shape = std::vector<int64_t>{B, S};
  sl.documents = docs;
  sl.input_padding = input_padding(in);
  // Each row's stream as the unpacked shard builds it (its documents at their row offsets, the caller's
  // padding), then the rows back to back.
  std::vector<Stream> row_streams;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<DocSpan> row;
    for (const auto& d : docs)
      if (d.row == b) row.push_back({0, d.offset, d.real, d.slot});
    row_streams.push_back(unpacked_stream(
        S, row, row_len, sl.input_padding.empty() ? nullptr : sl.input_padding.data() + b * S));
  }
  sl.streams.push_back(rows_stream(row_streams));
  sl.stream_source.assign(static_cast<size_t>(P), -1);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i) sl.stream_source[static_cast<size_t>(b * row_len + i)] = b * S + i;
  if (row_len != S) {
    at::Tensor pm = at::arange(S, at::kLong).unsqueeze(0) + at::arange(B, at::kLong).unsqueeze(1) * row_len;
    sl.input_token_stream_positions = pm.contiguous();
  }
  shard_layout_ = std::move(sl);
  maps_.clear();
  const Stream& stream = shard_layout_->streams.front();
  const std::vector<int64_t>& mine = shard_layout_->global.ranks[static_cast<size_t>(options_.cp_rank)];
  const auto local_n = static_cast<int64_t>(mine.size());

  auto take = [&](const at::Tensor& t, int64_t seq_dim, const at::Scalar& fill) {
    return apply(shard_map(Coords::rows, P, t.device()), t.flatten(seq_dim - 1, seq_dim), seq_dim - 1, fill,
                 "shard: pad value missing")
        .unsqueeze(seq_dim - 1);
  };
  Batch out;
  if (in.input_ids) out.input_ids = take(*in.input_ids, 1, options_.padding_token_id);
  if (in.inputs_embeds) out.inputs_embeds = take(*in.inputs_embeds, 1, 0);
  out.labels = take(*in.labels, 1, kIgnoreIndex);
  if (in.loss_mask) out.loss_mask = take(*in.loss_mask, 1, 0);
  // padding_mask: the stream's (the caller's padding and the rows' right padding).
  at::Tensor pad_mask = at::empty({1, local_n}, at::kBool);
  for (int64_t j = 0; j < local_n; ++j)
    pad_mask.data_ptr<bool>()[j] = stream.tokens[static_cast<size_t>(mine[static_cast<size_t>(j)])].valid == 0;
  out.padding_mask = pad_mask.to(prim.device());
  at::Tensor pos;
  int64_t pos_dim = 1;
  if (in.position_ids) {
    pos = *in.position_ids;
    pos_dim = pos.dim() == 3 ? 2 : 1;
    if (pos.dim() == 2 && pos.size(0) != B) pos = pos.expand({B, S});
  } else {
    pos = at::arange(S, prim.options().dtype(at::kLong)).unsqueeze(0).expand({B, S});
  }
  out.position_ids = shard_positions(pos.contiguous(), pos_dim, Coords::rows);
  for (const auto& [key, ex] : in.extras)
    out.extras[key] = ExtraBuffer{take(ex.tensor, ex.seq_dim, ex.fill.value_or(0)), ex.seq_dim, ex.fill};
  out.seq_lens = in.seq_lens;
  out.seq_lens_padded = in.seq_lens_padded;
  return out;
}

}  // namespace cpbench
