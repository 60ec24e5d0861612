#include "harness/runner/step_check.hpp"

#include "harness/model/model.hpp"
#include "harness/runner/reference_check.hpp"
#include "sharders/core/nvtx.hpp"

namespace cpbench {

namespace {

// DSA's picks ([B, S, n] input positions, sorted per row: sets) of the CP run against the reference's, row
// by row over the real tokens: exact (a row is one element; any difference fails). 16-bit runs compare
// with the single rank in their own dtype (the same roundings of the scores).
TensorError compare_picks(const at::Tensor& got, const at::Tensor& ref, const at::Tensor& padding,
                          const at::Tensor& owner) {
  TensorError e;
  e.tensor = "dsa:picks";
  e.criterion = "exact";
  if (!got.defined() || got.sizes() != ref.sizes()) {
    e.ok = false;
    e.score = 1e30;
    e.worst = "the CP run's picks " + (got.defined() ? shape_str(got.sizes()) : std::string("(none)")) +
              " and the reference's " + shape_str(ref.sizes()) + " differ in shape";
    return e;
  }
  const at::Tensor rows_differ = got.ne(ref).any(-1).logical_and(padding.logical_not());  // [B, S]
  e.elements = padding.logical_not().sum().item<int64_t>();
  e.mismatches = rows_differ.sum().item<int64_t>();
  e.ok = e.mismatches == 0;
  e.score = static_cast<double>(e.mismatches);
  if (!e.ok) {
    const at::Tensor at = rows_differ.flatten().nonzero()[0][0];
    const int64_t i = at.item<int64_t>(), b = i / got.size(1), s = i % got.size(1);
    const auto row = [&](const at::Tensor& t) {
      std::string out;
      const at::Tensor r = t[b][s];
      for (int64_t j = 0; j < r.size(0); ++j) out += (j ? "," : "") + std::to_string(r[j].item<int64_t>());
      return out;
    };
    e.worst = "(b=" + std::to_string(b) + ", s=" + std::to_string(s) + ")" +
              (owner.defined() ? " owned by rank " + std::to_string(owner[b][s].item<int64_t>()) : std::string()) +
              ": cp picks {" + row(got) + "}, reference {" + row(ref) + "}";
  }
  return e;
}

}  // namespace

std::vector<TensorError> check_outputs(const CaseContext& x, const Outputs& got, const References& ref,
                                       const char* step) {
  nvtx::Range range{x.nvtx, "check"};
  std::vector<TensorError> errs;
  if (x.cp_rank == 0) {
    const bool precision = judged_by_precision(x.c.dtype, x.s.model.has_recurrent());
    const ElementwiseBound bound = elementwise_bound(x.c.dtype);
    const PrecisionRule rule;
    // Logits at padding positions are not part of the model's contract (the shard may drop them).
    const at::Tensor valid = x.data.batch.padding_mask->logical_not().unsqueeze(-1).to(at::kCPU);
    const auto masked = [&](const at::Tensor& t) { return t.defined() ? t.to(at::kCPU) * valid : t; };
    const auto check = [&](const std::string& name, const at::Tensor& cp, const at::Tensor& exact,
                           const at::Tensor& single, const ElementNames& names, const at::Tensor& rounding = {}) {
      TensorError e = precision ? compare_precision(name, cp, single, exact, rule, names, rounding)
                                : compare_elementwise(name, cp, exact, bound, names);
      e.step = step;
      errs.push_back(std::move(e));
    };
    if (precision) {
      // The loss is a mean over tokens: judged against the single rank's per-token errors, not against
      // its one signed sum (compare_precision_mean). What the CP run adds to the loss beyond its logits
      // (the normalization, the sum over ranks) is checked exactly instead: both sides are float64 from
      // the same 16-bit logits, so the CP loss must equal the loss of its own gathered logits.
      const Batch& b = x.data.batch;
      const at::Tensor labels = b.labels->to(at::kCPU);
      std::optional<at::Tensor> loss_mask;
      if (b.loss_mask) loss_mask = b.loss_mask->to(at::kCPU);
      const at::Tensor count = valid_token_count(labels, loss_mask);
      // The mixers' own loss terms (DSA's indexer loss) are judged on their own below: the LM loss here.
      const auto lm = [](const Outputs& o) {
        return o.aux_loss.defined() ? o.loss.to(at::kDouble) - o.aux_loss : o.loss;
      };
      TensorError e = compare_precision_mean("loss", lm(got), lm(ref.exact),
                                             token_losses(ref.single.logits.to(at::kCPU), labels, loss_mask),
                                             token_losses(ref.exact.logits.to(at::kCPU), labels, loss_mask), count, rule);
      e.step = step;
      errs.push_back(std::move(e));
      const at::Tensor own = token_losses(got.logits.to(at::kCPU), labels, loss_mask).sum() / count;
      TensorError o = compare_elementwise("loss:from_cp_logits", lm(got), own, elementwise_bound(at::kDouble), {});
      o.step = step;
      errs.push_back(std::move(o));
    } else {
      check("loss", got.loss, ref.exact.loss, ref.single.loss, {});
    }
    if (ref.exact.aux_loss.defined())  // DSA's indexer loss: a mean over the whole sequence's valid rows
      check("loss:indexer", got.aux_loss.reshape({1}), ref.exact.aux_loss.reshape({1}),
            precision ? ref.single.aux_loss.reshape({1}) : at::Tensor(), {});
    if (ref.exact.picks.defined()) {  // DSA: per row, the picked key SETS equal the reference's
      TensorError e = compare_picks(got.picks, precision ? ref.single.picks : ref.exact.picks,
                                    x.data.batch.padding_mask->to(at::kCPU), got.owner);
      e.step = step;
      errs.push_back(std::move(e));
    }
    check("logits", masked(got.logits), masked(ref.exact.logits), masked(ref.single.logits), {{"b", "s", "v"}, &got.owner});
    check(x.data.batch.inputs_embeds ? "grad:inputs_embeds" : "grad:embeddings_out", got.x0_grad, ref.exact.x0_grad,
          ref.single.x0_grad, {{"b", "s", "h"}, &got.owner});
    double grad_scale = 0;
    for (const auto& g : ref.exact.grads) grad_scale = std::max(grad_scale, g.abs().max().item<double>());
    for (size_t i = 0; i < x.params.size(); ++i)
      check("grad:" + x.params[i].first, got.grads[i], ref.exact.grads[i],
            precision ? ref.single.grads[i] : at::Tensor(), {{"i", "j"}, nullptr, grad_scale},
            i < got.grad_rounding.size() ? got.grad_rounding[i] : at::Tensor());
  }
  if (x.world_pg) {
    // Data-parallel replicas check their own batches; the report takes the worst of them.
    comm::Communicator world(x.world_pg->backend_ptr());
    // loss (and loss:from_cp_logits), logits, x0 (and loss:indexer)
    const int64_t n = static_cast<int64_t>(x.params.size()) + 4 + (got.aux_loss.defined() ? 1 : 0) +
                      (got.picks.defined() ? 1 : 0);
    at::Tensor worst = at::zeros({n}, at::kDouble);
    for (size_t i = 0; i < errs.size(); ++i) worst[static_cast<int64_t>(i)] = errs[i].score;
    world.all_reduce_max(worst);
    for (size_t i = 0; i < errs.size(); ++i) {
      const double w = worst[static_cast<int64_t>(i)].item<double>();
      if (w > errs[i].score) {
        errs[i].score = w;
        errs[i].ok = w <= 1.0;
        errs[i].worst += " (another data-parallel replica is worse: error/bound " + std::to_string(w) + ")";
      }
    }
  }
  return errs;
}

// Per tensor, the worse of the first and the last checked step.
std::vector<TensorError> worse_of(std::vector<TensorError> first, const std::vector<TensorError>& last) {
  for (size_t i = 0; i < first.size() && i < last.size(); ++i) {
    const bool last_worse = (!last[i].ok && first[i].ok) || (last[i].ok == first[i].ok && last[i].score > first[i].score);
    if (last_worse) first[i] = last[i];
  }
  return first;
}

}  // namespace cpbench
