// The attention metadata of a shard (Sharder::attention_meta): this rank's tokens' positions, segments,
// documents and validity, rebuilt from what the shard returned (thd: its cu_seqlens, read back in the
// one cu_seqlens format) by the one stream producer (stream.hpp).
#include "sharders/core/check.hpp"
#include "sharders/cu_seqlens.hpp"
#include "sharders/sharder.hpp"

namespace cpbench {

TokenMeta Sharder::attention_meta(const Batch& local) const {
  const ShardLayout& L = shard_layout();
  const std::vector<int64_t> mine = rank_indices(L.padded_seq_len, options_.cp_rank);
  TokenMeta m;
  if (layout_->packed()) {
    // The attention consumes the THD metadata the shard returned, as Transformer Engine's kernels
    // consume cu_seqlens (padded boundaries) with the real lengths beside them.
    CP_CHECK(local.cu_seqlens_real && local.cu_seqlens_padded, who(),
             ": attention_meta needs the cu_seqlens_real / cu_seqlens_padded of a thd shard");
    const int64_t N = L.num_chunks;
    const auto stream_cu = [&](const at::Tensor& t) {
      return read_cu_seqlens(t, N, options_.seq_lens_sentinel, who());
    };
    const std::vector<int64_t> cu_pad = stream_cu(*local.cu_seqlens_padded);
    CP_CHECK(!cu_pad.empty() && cu_pad.back() == L.padded_seq_len, who(), ": cu_seqlens_padded ", shape_str(cu_pad),
             " does not end at the padded stream length ", L.padded_seq_len);
    if (local.cu_seqlens && options_.cp_size > 1)
      CP_CHECK(stream_cu(*local.cu_seqlens) == cu_pad, who(), ": cu_seqlens ", shape_str(local.cu_seqlens->sizes()),
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
    CP_CHECK(pm.sizes().equals(m.pos.sizes()), who(), ": the local padding_mask ", shape_str(pm.sizes()),
             " does not match the local tokens ", shape_str(m.pos.sizes()));
    m.valid = pm.logical_not();
  }
  return m;
}

}  // namespace cpbench
