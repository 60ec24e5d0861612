#include "harness/model/data.hpp"

#include "sharders/core/check.hpp"

namespace cpbench {

namespace {
// splitmix64: a value that depends only on (seed, stream, b, s, salt).
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
uint64_t addr(uint64_t seed, uint64_t stream, int64_t b, int64_t s, uint64_t salt) {
  return mix(mix(mix(mix(seed) ^ stream) ^ static_cast<uint64_t>(b)) ^ (static_cast<uint64_t>(s) * 8 + salt));
}
}  // namespace

GlobalData make_global_data(const BatchSpec& spec, const ModelConfig& model, at::ScalarType dtype,
                            const at::Device& device, uint64_t stream) {
  const int64_t B = spec.batch_size, S = spec.seq_len;
  std::vector<std::vector<int64_t>> docs(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    if (spec.documents.empty())
      docs[b] = {S};
    else
      docs[b] = spec.documents.size() == 1 ? spec.documents[0] : spec.documents[static_cast<size_t>(b)];
  }
  size_t max_docs = 0;
  for (const auto& d : docs) max_docs = std::max(max_docs, d.size());

  at::Tensor ids = at::full({B, S}, spec.padding_token_id, at::kLong);
  at::Tensor labels = at::full({B, S}, kIgnoreIndex, at::kLong);
  at::Tensor pos = at::zeros({B, S}, at::kLong);
  at::Tensor pad = at::ones({B, S}, at::kBool);
  at::Tensor doc_ids = at::full({B, S}, -1, at::kLong);
  at::Tensor loss_mask = at::zeros({B, S}, at::kLong);
  at::Tensor seq_lens = at::full({B, static_cast<int64_t>(max_docs)}, kSeqLensSentinel, at::kLong);
  auto I = ids.accessor<int64_t, 2>();
  auto L = labels.accessor<int64_t, 2>();
  auto Pp = pos.accessor<int64_t, 2>();
  auto M = pad.accessor<bool, 2>();
  auto D = doc_ids.accessor<int64_t, 2>();
  auto LM = loss_mask.accessor<int64_t, 2>();
  auto SL = seq_lens.accessor<int64_t, 2>();
  int64_t real = 0;
  const auto vocab = static_cast<uint64_t>(model.vocab);
  for (int64_t b = 0; b < B; ++b) {
    int64_t s = 0;
    for (size_t d = 0; d < docs[b].size(); ++d) {
      SL[b][static_cast<int64_t>(d)] = docs[b][d];
      for (int64_t k = 0; k < docs[b][d]; ++k, ++s) {
        // Avoid the padding id in content so padding is unambiguous.
        int64_t tok = static_cast<int64_t>(addr(spec.seed, stream, b, s, 1) % (vocab - 1));
        if (tok >= spec.padding_token_id) ++tok;
        I[b][s] = tok;
        Pp[b][s] = k;
        M[b][s] = false;
        D[b][s] = static_cast<int64_t>(d);
        LM[b][s] = spec.loss_mask ? (addr(spec.seed, stream, b, s, 2) % 8 != 0) : 1;
        ++real;
      }
    }
    // Padding continues the position count of the last document.
    for (int64_t t = s, last = s > 0 ? Pp[b][s - 1] : -1; t < S; ++t) Pp[b][t] = ++last;
  }
  // Labels: the next token of the same document (shifted before sharding, so shard boundaries
  // cannot misalign them).
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s + 1 < S; ++s)
      if (D[b][s] >= 0 && D[b][s + 1] == D[b][s]) L[b][s] = I[b][s + 1];

  GlobalData g;
  g.real_tokens = real;
  Batch& batch = g.batch;
  if (spec.primary == "inputs_embeds") {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(mix(spec.seed ^ (stream + 77)));
    at::Tensor e = at::normal(0.0, 1.0, {B, S, model.hidden}, gen, at::TensorOptions().dtype(at::kDouble));
    e.masked_fill_(pad.unsqueeze(-1), 0.0);
    batch.inputs_embeds = e.to(device, dtype);
  } else {
    batch.input_ids = ids.to(device);
  }
  batch.labels = labels.to(device);
  if (spec.mrope) {
    // [3, B, S]: temporal = position, height/width = a deterministic 2-D walk over the document.
    at::Tensor h = at::floor_divide(pos, 8), w = at::remainder(pos, 8);
    batch.position_ids = at::stack({pos, h, w}, 0).to(device);
  } else {
    batch.position_ids = pos.to(device);
  }
  batch.padding_mask = pad.to(device);
  if (spec.loss_mask) batch.loss_mask = loss_mask.to(device);
  if (!spec.documents.empty()) batch.seq_lens = seq_lens.to(device);
  g.doc_ids = doc_ids.to(device);
  g.reference_meta.pos = at::arange(S, at::TensorOptions().dtype(at::kLong).device(device)).unsqueeze(0).expand({B, S}).contiguous();
  g.reference_meta.segment = at::zeros({B, S}, at::TensorOptions().dtype(at::kLong).device(device));
  g.reference_meta.doc = g.doc_ids;
  g.reference_meta.valid = pad.logical_not().to(device);
  return g;
}

at::Tensor input_owner(const Sharder& sharder, const GlobalData& data) {
  const ShardLayout& L = sharder.shard_layout();
  const std::vector<int64_t> owner = L.global.owners();
  const int64_t B = data.doc_ids.size(0), S = data.doc_ids.size(1);
  at::Tensor out = at::full({B, S}, -1, at::kLong);
  auto o = out.accessor<int64_t, 2>();
  const int64_t* moved = L.input_token_stream_positions ? L.input_token_stream_positions->data_ptr<int64_t>() : nullptr;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) {
      int64_t p = s;
      if (L.input_row_shape) p = moved ? moved[b * S + s] : b * S + s;
      o[b][s] = p >= 0 ? owner[static_cast<size_t>(p)] : -1;
    }
  return out;
}

}  // namespace cpbench
