// The Sharder's token verbs: any token-aligned tensor sharded exactly like the batch, and gathered back
// (all ranks' shards -> the global stream or the caller's coordinates), through the cached token maps
// (token_map.hpp).
#include <functional>

#include "sharders/core/check.hpp"
#include "sharders/sharder.hpp"

namespace cpbench {

at::Tensor Sharder::local_token_global_indices(int64_t P, std::optional<int64_t> rank) const {
  return as_index_tensor(rank_indices(P, rank.value_or(options_.cp_rank)), at::kCPU);
}

const TokenMap& Sharder::shard_map(Coords from, int64_t P, const at::Device& device) const {
  return maps_.shard(static_cast<int>(from), P, device, [&] {
    std::vector<int64_t> src = rank_indices(P, options_.cp_rank);
    if (from == Coords::original) {
      const int64_t S = shard_layout().original_seq_len.value();
      for (auto& p : src) p = p < S ? p : -1;
    } else if (from == Coords::rows) {
      const auto& source = shard_layout().stream_source;
      for (auto& p : src) p = source[static_cast<size_t>(p)];
    }
    return make_token_map(src, device);
  });
}

const ScatterMap& Sharder::gather_map(Coords to, int64_t P, const at::Device& device) const {
  return maps_.gather(static_cast<int>(to), P, device, [&] {
    // dst of stream position p in the output coordinates (-1: not in the output).
    std::function<int64_t(int64_t)> dst_of = [](int64_t p) { return p; };
    int64_t out_len = P;
    if (to == Coords::original) {
      const int64_t S = shard_layout().original_seq_len.value();
      out_len = S;
      dst_of = [S](int64_t p) { return p < S ? p : -1; };
    } else if (to == Coords::rows) {
      const ShardLayout& L = shard_layout();
      out_len = (*L.input_row_shape)[0] * (*L.input_row_shape)[1];
      dst_of = [&L](int64_t p) { return L.stream_source[static_cast<size_t>(p)]; };
    }
    std::vector<std::vector<int64_t>> dst(static_cast<size_t>(options_.cp_size));
    for (int64_t r = 0; r < options_.cp_size; ++r)
      for (int64_t p : rank_indices(P, r)) dst[static_cast<size_t>(r)].push_back(dst_of(p));
    return make_scatter_map(dst, out_len, device);
  });
}

at::Tensor Sharder::apply(const TokenMap& m, const at::Tensor& t, int64_t dim, const std::optional<at::Scalar>& fill,
                          const char* what) const {
  CP_CHECK(!m.holes.defined() || fill.has_value(), who(), ": ", what);
  return apply_token_map(m, t, dim, fill);
}

at::Tensor Sharder::scatter(const ScatterMap& m, const std::vector<at::Tensor>& parts, int64_t dim,
                            const std::optional<at::Scalar>& fill, const char* what) const {
  CP_CHECK(!m.holes.defined() || fill.has_value(), who(), ": ", what);
  return apply_scatter_map(m, parts, dim, fill);
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
    const at::Tensor d = as_index_tensor(delta, pos.device()).view(view);
    out.index_copy_(dim, as_index_tensor(hole, pos.device()),
                    pos.index_select(dim, as_index_tensor(base, pos.device())) + d);
  }
  return rows ? out.unsqueeze(pos_dim - 1) : out;
}

at::Tensor Sharder::shard_token_tensor(const at::Tensor& t, int64_t seq_dim, std::optional<at::Scalar> fill) const {
  CP_CHECK(seq_dim >= 0 && seq_dim < t.dim(), who(), ": shard_token_tensor: seq_dim ", seq_dim,
           " is outside a tensor of shape ", shape_str(t.sizes()));
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
          "shard_token_tensor: a tensor of shape ", shape_str(t.sizes()), " in input-row coordinates [B, S] = ",
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
        who(), ": shard_token_tensor: tensor of shape ", shape_str(t.sizes()), " has length ", n, " on dim ", seq_dim,
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
               ", T_local, ..] on dims (seq_dim-1, seq_dim), got ", shape_str(p.sizes()), " with seq_dim ", seq_dim);
      chunk_parts.push_back(p.flatten(seq_dim - 1, seq_dim).unsqueeze(seq_dim - 1));
    }
  }
  const std::vector<at::Tensor>& parts_in = N > 1 ? chunk_parts : parts_chunked;
  CP_CHECK(static_cast<int64_t>(parts_in.size()) == options_.cp_size, who(),
           ": gather_token_tensor needs one shard per rank (", options_.cp_size, "), got ", parts_in.size());
  CP_CHECK(seq_dim >= 0 && seq_dim < parts_in[0].dim(), who(), ": gather_token_tensor: seq_dim ", seq_dim,
           " is outside a shard of shape ", shape_str(parts_in[0].sizes()));
  for (size_t r = 0; r < parts_in.size(); ++r)
    CP_CHECK(parts_in[r].sizes() == parts_in[0].sizes(), who(), ": gather_token_tensor: rank ", r, "'s shard ",
             shape_str(parts_in[r].sizes()), " differs from rank 0's ", shape_str(parts_in[0].sizes()));
  const int64_t n = parts_in[0].size(seq_dim) * options_.cp_size;
  if (shard_layout_)
    CP_CHECK(n == shard_layout_->padded_seq_len, who(), ": gathered length ", n, " on dim ", seq_dim, " (",
             options_.cp_size, " shards of ", shape_str(parts_in[0].sizes()), ") != padded_seq_len ",
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
             shape_str(parts_in[0].sizes()));
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
           " is outside a tensor of shape ", shape_str(rank_order.sizes()));
  const int64_t n = rank_order.size(seq_dim);
  const int64_t N = shard_layout_ ? shard_layout_->num_chunks : 1;  // thd chunks: [N, P / N] rows
  if (shard_layout_)
    CP_CHECK(n == shard_layout_->padded_seq_len / N, who(), ": gathered length ", n, " on dim ", seq_dim, " (shape ",
             shape_str(rank_order.sizes()), ") != padded_seq_len ", shard_layout_->padded_seq_len / N, " of the last shard",
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
