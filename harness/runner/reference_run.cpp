#include "harness/runner/reference_run.hpp"

#include <chrono>

#include "harness/runner/reference_check.hpp"
#include "harness/runner/train_step.hpp"
#include "kernels/attention/mla.hpp"
#include "kernels/attention/reference.hpp"

namespace cpbench {

at::Tensor grad_or_zeros(const at::Tensor& p) { return p.grad().defined() ? p.grad() : at::zeros_like(p); }

namespace {

// The unsharded batch on one rank through `model`: with plain masked attention, or (`cp_kernels`)
// through a CP transport at W = 1 on the case's kernels (one block, the same kernel calls and
// roundings as a CP rank's blocks).
Outputs run_reference(const CaseContext& x, TinyTransformer& model, const GlobalData& data, bool cp_kernels = false) {
  model->zero_grad();
  const TokenMeta& m = data.reference_meta;
  const comm::Communicator one;  // a world of one: nothing travels
  const auto w1 = make_transport("allgather");
  std::shared_ptr<const kernels::PlanCache> plans;
  const bool sliding = x.s.model.attention.has_sliding();
  std::shared_ptr<const kernels::PlanCache> sliding_plans;
  if (cp_kernels) plans = w1->make_plans(x.c.mask, m, m, {}, 0, 1, x.device);
  if (cp_kernels && sliding) sliding_plans = w1->make_plans(x.c.sliding_mask, m, m, {}, 0, 1, x.device);
  // One attention per mask: the case's (full layers) and, with layer_types, the sliding layers' window.
  const auto attention_with = [&](const MaskSpec& mask, const std::shared_ptr<const kernels::PlanCache>& mask_plans) {
    return AttentionFn([&, mask, mask_plans](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             const at::Tensor& sinks, const at::Tensor& kv_up) {
      if (!cp_kernels) {
        if (!kv_up.defined()) return local_attention(q, k, v, m, m, mask, x.scale, sinks);
        // MLA's latent wire: the single rank up-projects the whole latent the layer's way (HF's kv_b_proj
        // form, kernels/attention/mla.hpp mla_expand), not the transports' per-block path.
        const int64_t dn = q.size(3) - (k.size(3) - kv_up.size(1));
        const auto [ke, ve] = kernels::mla_expand(k.select(1, 0), kv_up, q.size(1), dn);
        return local_attention(q, ke, ve, m, m, mask, x.scale, sinks);
      }
      AttentionContext ctx{&one, mask, m, m, x.scale, nullptr, "", mask_plans,
                           x.s.kernels == AttentionKernels::tiled, {}, x.s.kernels == AttentionKernels::flash_numerics};
      ctx.sinks = sinks;
      ctx.kv_up = kv_up;
      return w1->attend(q, k, v, ctx);
    });
  };
  const AttentionFn attn = attention_with(x.c.mask, plans);
  const AttentionFn sliding_attn = attention_with(x.c.sliding_mask, sliding_plans);
  const Batch& b = data.batch;
  at::Tensor embeds;
  if (b.inputs_embeds) embeds = b.inputs_embeds->clone();
  MixerContexts contexts;  // the other mixers on one rank
  for (const Mixer* mixer : mixers_in(x.s.model.mixers))
    if (auto ctx = mixer->single_rank_context(x.s.model, m, x.c.mask, model->parameters()[0].scalar_type(), x.device))
      contexts.emplace(mixer->letter(), std::move(ctx));
  ModelOutput out = model->forward(b.input_ids, b.inputs_embeds ? std::optional<at::Tensor>(embeds) : std::nullopt,
                                   *b.position_ids, attn, contexts, sliding ? &sliding_attn : nullptr);
  at::Tensor loss = token_loss_sum(out.logits, *b.labels, b.loss_mask) / valid_token_count(*b.labels, b.loss_mask);
  at::Tensor aux_sum;
  for (const auto& [letter, ctx] : contexts)  // e.g. DSA's indexer loss
    if (const at::Tensor aux = ctx->aux_loss(); aux.defined()) {
      loss = loss + aux.to(loss.scalar_type());
      aux_sum = aux_sum.defined() ? aux_sum + aux.detach() : aux.detach();
    }
  loss.backward();
  Outputs ref;
  ref.loss = loss.detach();
  if (aux_sum.defined()) ref.aux_loss = aux_sum.to(at::kDouble);
  for (const auto& [letter, ctx] : contexts)  // one rank: a pick's column is its input position
    if (const at::Tensor p = ctx->key_picks(); p.defined())
      ref.picks = sorted_picks(p.to(at::kCPU), x.s.model.attention.dsa.topk);
  ref.logits = out.logits.detach();
  ref.x0_grad = out.x0.grad().detach();
  for (const auto& p : model->parameters()) ref.grads.push_back(grad_or_zeros(p).detach().clone());
  return ref;
}

}  // namespace

bool single_rank_uses_cp_kernels(AttentionKernels kernels, bool cuda, at::ScalarType dtype) {
  const bool sixteen = dtype == at::kBFloat16 || dtype == at::kHalf;
  if (!sixteen) return false;
  return kernels == AttentionKernels::flash_numerics || (kernels == AttentionKernels::fused && cuda);
}

References run_references(CaseContext& x) {
  const auto t = std::chrono::steady_clock::now();
  References r;
  if (!judged_by_precision(x.c.dtype, x.s.model.has_recurrent())) {
    r.exact = run_reference(x, x.model, x.data);
  } else {
    r.single = run_reference(x, x.model, x.data, single_rank_uses_cp_kernels(x.s.kernels, x.cuda, x.c.dtype));
    TinyTransformer model64(x.s.model, at::kDouble, x.device);
    {
      at::NoGradGuard no_grad;
      const auto lp = x.model->parameters();
      const auto hp = model64->parameters();
      for (size_t i = 0; i < hp.size(); ++i) hp[i].copy_(lp[i].to(at::kDouble));
    }
    GlobalData data64 = x.data;
    if (data64.batch.inputs_embeds) data64.batch.inputs_embeds = data64.batch.inputs_embeds->to(at::kDouble);
    r.exact = run_reference(x, model64, data64);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  return r;
}

}  // namespace cpbench
