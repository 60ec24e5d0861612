#pragma once
// Embeddings, the LM head and the loss (docs/planner.md, "The whole step"). Vocab V, hidden h:
//   params       embedding V h, LM head V h (none more when tied)
//   FLOPs        the head 2 V h / tp per token forward (vocab-parallel under TP), x (3, or 4 under full
//                recompute), in bf16 (FP8 recipes keep the output layer in bf16); the lookup computes nothing
//   loss         softmax + cross-entropy over the logits: memory-bound, 3 passes of fp32 logits (read, write
//                the gradient, read it back for the head's backward) at HBM bandwidth
//   memory       the logits of a micro-batch on the last stage: T V / tp x logit_bytes (constants: bf16
//                output + fp32 copy + fp32 gradient), T = its tokens (b S / cp) — at 128K tokens and a 150K
//                vocab that is ~190 GiB / tp: what long context pays first
#include "harness/planner/step/case_shape.hpp"

namespace cpbench::plan::step {

[[nodiscard]] double embedding_params(const ModelShape& m);  // the input embedding
[[nodiscard]] double head_params(const ModelShape& m);       // the LM head (0 when tied)
[[nodiscard]] Component head_component(const CaseShape& s);  // embedding + head + loss, the last stage's
[[nodiscard]] double logits_bytes(const CaseShape& s);

}  // namespace cpbench::plan::step
