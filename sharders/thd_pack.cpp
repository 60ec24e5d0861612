#include "sharders/thd_pack.hpp"

#include <algorithm>
#include <utility>

#include "sharders/core/check.hpp"
#include "sharders/cu_seqlens.hpp"

namespace cpbench {

std::vector<DocSpan> thd_documents(std::vector<DocSpan> given, const Batch& in, const SharderOptions& options,
                                   const std::string& who) {
  const at::Tensor& prim = in.primary();
  const int64_t B = prim.size(0), S = prim.size(1);
  const int64_t rows_per_chunk = B / options.num_chunks;
  std::vector<DocSpan> docs = std::move(given);
  if (!in.seq_lens) {
    // Each row is one document. Without a padding_mask its real tokens end where the row's right
    // padding (a run of padding_token_id up to the end) begins, as the seed derives THD padding.
    const bool from_tokens = !in.padding_mask && in.input_ids;
    at::Tensor ids = from_tokens ? in.input_ids->to(at::kCPU, at::kLong).contiguous() : at::Tensor();
    for (int64_t b = 0; b < B; ++b) {
      int64_t real = S;
      if (from_tokens) {
        const int64_t* row = ids.data_ptr<int64_t>() + b * S;
        while (real > 0 && row[real - 1] == options.padding_token_id) --real;
        for (int64_t i = 0; i < real; ++i)
          CP_CHECK(row[i] != options.padding_token_id, who, ": padding_token_id=", options.padding_token_id,
                   " also occurs as content (input_ids[", b, "][", i, "], before the row's right padding at ", real,
                   "); without seq_lens thd takes padding from the tokens, so pass a padding_mask or seq_lens");
      }
      docs.push_back({b, 0, real, S});
    }
  } else if (options.thd_trailing == SharderOptions::ThdTrailing::fold) {
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
  return docs;
}

std::vector<int64_t> thd_slots(const std::vector<DocSpan>& docs, int64_t multiple, int64_t num_chunks,
                               int64_t rows_per_chunk, const std::string& who) {
  const int64_t N = num_chunks;
  std::vector<int64_t> slots;
  for (const auto& d : docs) slots.push_back(layout_math::round_up(d.slot, multiple));
  if (N > 1) {
    // Equal chunk streams: each chunk's last document grows to the longest chunk (differences are
    // multiples of `multiple`, so alignment holds).
    std::vector<int64_t> len(static_cast<size_t>(N), 0), last(static_cast<size_t>(N), -1);
    for (size_t d = 0; d < docs.size(); ++d) {
      const auto c = static_cast<size_t>(docs[d].row / rows_per_chunk);
      len[c] += slots[d];
      last[c] = static_cast<int64_t>(d);
    }
    const int64_t longest = *std::max_element(len.begin(), len.end());
    for (int64_t c = 0; c < N; ++c) {
      CP_CHECK(last[static_cast<size_t>(c)] >= 0, who, ": chunk ", c, " (rows ", c * rows_per_chunk, "..",
               (c + 1) * rows_per_chunk - 1, ") of num_chunks=", N, " holds no document");
      slots[static_cast<size_t>(last[static_cast<size_t>(c)])] += longest - len[static_cast<size_t>(c)];
    }
  }
  return slots;
}

int64_t place_documents(ShardLayout& sl, const std::vector<DocSpan>& docs, int64_t B, int64_t S) {
  const std::vector<int64_t>& cu_pad = sl.global.cu_seqlens_padded;
  const int64_t P = sl.global.padded_seq_len;
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
  return max_padded;
}

Batch Sharder::shard_packed(const Batch& in) {
  const at::Tensor& prim = in.primary();
  const int64_t B = prim.size(0), S = prim.size(1);
  const int64_t W = options_.cp_size;
  // Rows are flattened into one stream, so an extra must carry the batch dim right before its
  // sequence dim; any other batch size would flatten into the wrong tokens (or out of range).
  for (const auto& [key, ex] : in.extras)
    CP_CHECK(ex.seq_dim >= 1 && ex.tensor.size(ex.seq_dim - 1) == B, who(), ": extra_seq_buffers['", key,
             "'] ", shape_str(ex.tensor.sizes()), " with seq_dim ", ex.seq_dim, ": thd flattens [B, S] = [", B, ", ", S,
             "] into one stream, so dims (seq_dim-1, seq_dim) must be [", B, ", ", S, "]");
  const int64_t N = options_.num_chunks;
  CP_CHECK(N >= 1 && B % N == 0, who(), ": num_chunks=", N, " must divide the batch size B=", B,
           " (each chunk packs B / num_chunks rows into its own stream)");
  const int64_t rows_per_chunk = B / N;
  const std::vector<DocSpan> docs = thd_documents(documents(in), in, options_, who());
  LayoutRequest req{W, 0, thd_slots(docs, document_multiple(), N, rows_per_chunk, who()), options_.mask,
                    options_.chunk_size, {}};
  ShardLayout sl;
  sl.global = layout_->compute(req);
  // The layout was asked for slot widths; GlobalLayout::cu_seqlens promises real lengths.
  sl.global.cu_seqlens.assign(1, 0);
  for (const auto& d : docs) sl.global.cu_seqlens.push_back(sl.global.cu_seqlens.back() + d.real);
  const int64_t P = sl.global.padded_seq_len;
  sl.padded_seq_len = P;
  sl.input_row_shape = std::vector<int64_t>{B, S};
  sl.num_chunks = N;
  sl.documents = docs;
  sl.input_padding = input_padding(in);
  sl.streams.push_back(packed_stream(docs, sl.global.cu_seqlens, sl.global.cu_seqlens_padded, S,
                                     sl.input_padding.empty() ? nullptr : sl.input_padding.data()));
  const int64_t max_padded = place_documents(sl, docs, B, S);
  shard_layout_ = std::move(sl);
  maps_.clear();
  const Stream& stream = shard_layout_->streams.front();
  const std::vector<int64_t>& mine = shard_layout_->global.ranks[static_cast<size_t>(options_.cp_rank)];
  const auto local_n = static_cast<int64_t>(mine.size());

  auto take = [&](const at::Tensor& t, int64_t seq_dim, const at::Scalar& fill) {
    CP_CHECK(seq_dim >= 1, who(), ": thd flattens the batch dim before the sequence dim; seq_dim ", seq_dim,
             " of a tensor of shape ", shape_str(t.sizes()), " has no batch dim before it");
    return apply(shard_map(Coords::rows, P, t.device()), t.flatten(seq_dim - 1, seq_dim), seq_dim - 1, fill,
                 "shard: pad value missing")
        .unsqueeze(seq_dim - 1);
  };
  // [.., 1, N * T_c_local, ..] -> [.., N, T_c_local, ..]
  auto chunked = [&](const at::Tensor& t, int64_t seq_dim) {
    return N == 1 ? t : t.squeeze(seq_dim - 1).unflatten(seq_dim - 1, {N, local_n / N});
  };
  std::vector<int64_t> doc_chunk;
  for (const auto& d : docs) doc_chunk.push_back(d.row / rows_per_chunk);
  const auto per_chunk = [&](const std::vector<int64_t>& cu) {
    return write_cu_seqlens(cu, doc_chunk, N, options_.seq_lens_sentinel, prim.device());
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
  const at::Tensor cu_padded = per_chunk(shard_layout_->global.cu_seqlens_padded);
  const at::Tensor cu_real = per_chunk(shard_layout_->global.cu_seqlens);
  // As the seed: under CP (W > 1) cu_seqlens holds the padded boundaries, which is what Transformer
  // Engine's THD context parallelism consumes; without CP it keeps the real ones.
  out.cu_seqlens = W > 1 ? cu_padded : cu_real;
  out.cu_seqlens_padded = cu_padded;
  out.cu_seqlens_real = cu_real;
  out.max_seqlen = max_padded;
  return out;
}

}  // namespace cpbench
