// Sharder: the front of the sharding verbs (sharder.hpp). It validates and normalizes the batch and
// hands it to the rooms that do the work: unpacked sharding (shard_unpacked.cpp), THD packing
// (thd_pack.hpp), the attention metadata (attention_meta.cpp), the token verbs (token_verbs.cpp) over the
// cached token maps (token_map.hpp), the pad rule (pad_rule.hpp).
#include "sharders/sharder.hpp"

#include <numeric>

#include "sharders/core/check.hpp"

namespace cpbench {

const at::Tensor& Batch::primary() const {
  if (input_ids) return *input_ids;
  if (inputs_embeds) return *inputs_embeds;
  throw Error("batch: exactly one of input_ids [B, S] / inputs_embeds [B, S, H] is required, got neither");
}

const char* Batch::primary_key() const { return input_ids ? "input_ids" : "inputs_embeds"; }

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
    LayoutRequest req{options_.cp_size, P, {}, options_.mask, options_.chunk_size, {}};
    closed_form_ = layout_->compute(req);
  }
  return closed_form_->ranks[static_cast<size_t>(rank)];
}

Batch Sharder::normalized(const Batch& in) const {
  Batch b = in;
  const int64_t B = in.primary().size(0), S = in.primary().size(1);
  if (b.attention_mask) {
    const at::Tensor& am = *b.attention_mask;
    const bool is2 = am.dim() == 2 && am.size(0) == B && am.size(1) == S;
    const bool is4 = am.dim() == 4 && am.size(0) == B && am.size(1) == 1 && am.size(2) == S && am.size(3) == S;
    CP_CHECK(is2 || is4, who(), ": attention_mask must be [B, S] = [", B, ", ", S, "] or [B, 1, S, S] = [", B, ", 1, ",
             S, ", ", S, "], got ", shape_str(am.sizes()));
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
           in_batch.input_ids ? detail::concat("both (input_ids ", shape_str(in_batch.input_ids->sizes()), ", inputs_embeds ",
                                               shape_str(in_batch.inputs_embeds->sizes()), ")")
                              : std::string("neither"));
  if (in_batch.input_ids)
    CP_CHECK(in_batch.input_ids->dim() == 2, who(), ": input_ids must be [B, S], got ", shape_str(in_batch.input_ids->sizes()));
  else
    CP_CHECK(in_batch.inputs_embeds->dim() == 3, who(), ": inputs_embeds must be [B, S, H], got ",
             shape_str(in_batch.inputs_embeds->sizes()));
  const at::Tensor& prim = in_batch.primary();
  const int64_t B = prim.size(0), S = prim.size(1);
  CP_CHECK(S >= 1 && B >= 1, who(), ": ", in_batch.primary_key(), " ", shape_str(prim.sizes()), " has no tokens");
  const Batch in = normalized(in_batch);
  CP_CHECK(in.labels.has_value(), who(), ": batch needs labels [B, S] = [", B, ", ", S,
           "] (or a loss_mask to promote to labels), got none");
  auto check_bs = [&](const std::optional<at::Tensor>& t, const char* key) {
    if (!t) return;
    CP_CHECK(t->dim() == 2 && t->size(0) == B && t->size(1) == S, who(), ": ", key, " must be [B, S] = [", B,
             ", ", S, "] like ", in.primary_key(), ", got ", shape_str(t->sizes()));
  };
  check_bs(in.labels, "labels");
  check_bs(in.loss_mask, "loss_mask");
  check_bs(in.padding_mask, "padding_mask");
  if (in.position_ids) {
    const auto& p = *in.position_ids;
    const bool ok2 = p.dim() == 2 && (p.size(0) == B || p.size(0) == 1) && p.size(1) == S;
    const bool ok3 = p.dim() == 3 && p.size(1) == B && p.size(2) == S;
    CP_CHECK(ok2 || ok3, who(), ": position_ids must be [B, S] = [", B, ", ", S, "] or mRoPE [C, ", B, ", ", S,
             "], got ", shape_str(p.sizes()));
  }
  for (const auto& [key, ex] : in.extras) {
    CP_CHECK(ex.seq_dim >= 0 && ex.seq_dim < ex.tensor.dim(), who(), ": extra_seq_buffers['", key,
             "']: seq_dim ", ex.seq_dim, " is outside a tensor of shape ", shape_str(ex.tensor.sizes()));
    CP_CHECK(ex.tensor.size(ex.seq_dim) == S, who(), ": extra_seq_buffers['", key, "'] has length ",
             ex.tensor.size(ex.seq_dim), " on dim ", ex.seq_dim, " (shape ", shape_str(ex.tensor.sizes()),
             "), but the batch sequence length is ", S);
  }
  return layout_->packed() ? shard_packed(in) : shard_unpacked(in);
}

std::vector<DocSpan> Sharder::documents(const Batch& in) const {
  const at::Tensor& prim = in.primary();
  const int64_t B = prim.size(0), S = prim.size(1);
  const int64_t none = options_.seq_lens_sentinel;
  CP_CHECK(!in.seq_lens_padded || in.seq_lens, who(), ": seq_lens_padded ", shape_str(in.seq_lens_padded->sizes()),
           " given without seq_lens");
  std::vector<DocSpan> docs;
  if (!in.seq_lens) return docs;
  at::Tensor lens = in.seq_lens->to(at::kCPU, at::kLong).contiguous();
  CP_CHECK(lens.dim() == 2 && lens.size(0) == B, who(), ": seq_lens must be [B, D] with B=", B, ", got ",
           shape_str(lens.sizes()));
  at::Tensor slots = in.seq_lens_padded ? in.seq_lens_padded->to(at::kCPU, at::kLong).contiguous() : lens;
  CP_CHECK(slots.sizes() == lens.sizes(), who(), ": seq_lens_padded ", shape_str(slots.sizes()),
           " must have the shape of seq_lens ", shape_str(lens.sizes()));
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
               S, " (", in.primary_key(), " ", shape_str(prim.sizes()), ")");
      docs.push_back({b, off, real, slot});
      off += slot;
    }
  }
  CP_CHECK(!docs.empty(), who(), ": seq_lens ", shape_str(lens.sizes()), " holds no document");
  return docs;
}

std::vector<uint8_t> Sharder::input_padding(const Batch& in) {
  if (!in.padding_mask) return {};
  at::Tensor pm = in.padding_mask->to(at::kCPU, at::kByte).contiguous();
  return {pm.data_ptr<uint8_t>(), pm.data_ptr<uint8_t>() + pm.numel()};
}


}  // namespace cpbench
