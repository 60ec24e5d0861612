// The DeepSeek Sparse Attention negative controls (model.attention.dsa; kernels/mixers/attention/dsa/).
// Each shards like load_balanced, runs the case's transport (allgather or ring) and plants its fault
// through the DSA step context (CpStepInputs::fault, dsa_context.hpp) on every rank:
//   dsa_buffer_order  the gathered keys left in rank (buffer) order and the top-k by at::topk, which
//                     leaves score ties to the order the keys sit in: the picks among ReLU's exact-zero
//                     ties are then not the single rank's (ring: rank-order columns, the running top-k
//                     merged by at::topk).
//   dsa_kl_per_rank   the indexer's KL divided by this rank's valid rows instead of the sequence's.
//   dsa_no_detach     the sparse stage's indexer inputs not detached: the KL's gradient reaches the model.
//   dsa_shared_recompute  a shared indexer layer (model.attention.dsa.indexer_types) recomputing its own
//                     picks (the last full layer's indexer run on its own input) instead of reusing the
//                     full layer's: its picks and output are not the single rank's.
#include "kernels/controls/control.hpp"
#include "kernels/mixers/attention/dsa/dsa_context.hpp"

namespace cpbench {
namespace {

class DsaFault final : public Control {
 public:
  DsaFault(std::string name, std::string description, std::string fault, bool sparse_only, bool shared_only = false)
      : name_(std::move(name)),
        description_(std::move(description)),
        fault_(std::move(fault)),
        sparse_only_(sparse_only),
        shared_only_(shared_only) {}
  [[nodiscard]] std::string name() const override { return name_; }
  [[nodiscard]] std::string description() const override { return description_; }
  [[nodiscard]] std::string mixer_fault(const std::string& mixer, const ControlSite&) const override {
    return mixer == "attention" ? fault_ : "";
  }
  [[nodiscard]] std::string cannot_show(const ControlCase& where) const override {
    if (where.model && !where.model->attention.dsa.enabled())
      return "the " + name_ + " negative control needs model.attention.dsa";
    if (where.cp == 1) return "the " + name_ + " negative control cannot differ from the reference at cp=1";
    if (sparse_only_ && where.model && where.model->attention.dsa.loss != DsaLoss::sparse)
      return "the " + name_ + " negative control needs model.attention.dsa.loss: sparse";
    if (shared_only_ && where.model && where.model->attention.dsa.shared_layers() == 0)
      return "the " + name_ + " negative control needs a shared layer in model.attention.dsa.indexer_types";
    return "";
  }

 private:
  std::string name_, description_, fault_;
  bool sparse_only_, shared_only_;
};

}  // namespace

std::unique_ptr<Control> make_dsa_buffer_order_control() {
  return std::make_unique<DsaFault>("dsa_buffer_order",
                                    "load_balanced, DSA's keys left in rank order with an unstable top-k (wrong on purpose)",
                                    kDsaFaultBufferOrder, false);
}
std::unique_ptr<Control> make_dsa_kl_per_rank_control() {
  return std::make_unique<DsaFault>("dsa_kl_per_rank",
                                    "load_balanced, DSA's indexer KL averaged per rank, not over the sequence (wrong on purpose)",
                                    kDsaFaultKlPerRank, false);
}
std::unique_ptr<Control> make_dsa_no_detach_control() {
  return std::make_unique<DsaFault>("dsa_no_detach",
                                    "load_balanced, DSA's sparse-stage indexer inputs not detached (wrong on purpose)",
                                    kDsaFaultNoDetach, true);
}

std::unique_ptr<Control> make_dsa_shared_recompute_control() {
  return std::make_unique<DsaFault>("dsa_shared_recompute",
                                    "load_balanced, DSA's shared indexer layers recomputing their own picks (wrong on purpose)",
                                    kDsaFaultSharedRecompute, false, true);
}

}  // namespace cpbench
