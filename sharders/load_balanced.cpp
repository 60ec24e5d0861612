// load_balanced (head-tail, zigzag, DualChunkSwap; PyTorch's default, NeMo's "round-robin"):
// 2W chunks of c = P/2W, rank r owns chunks r and 2W-1-r in that order. Exactly balanced under a
// causal mask.
#include "sharders/layout.hpp"

namespace cpbench {
namespace {
class HeadTail final : public Layout {
 public:
  HeadTail(std::string name, std::string summary) : name_(std::move(name)), summary_(std::move(summary)) {}
  std::string name() const override { return name_; }
  std::string summary() const override { return summary_; }
  int64_t pad_multiple(int64_t cp) const override { return 2 * cp; }
  GlobalLayout compute(const LayoutRequest& req) const override {
    GlobalLayout g{name(), req.cp, req.seq_len, layout_math::checked_padded_len(*this, req), {}, {}, {}, 1};
    for (int64_t r = 0; r < req.cp; ++r) g.ranks.push_back(layout_math::head_tail(req.cp, g.padded_seq_len, r));
    return g;
  }

 private:
  std::string name_, summary_;
};
}  // namespace

std::unique_ptr<Layout> make_head_tail_layout(std::string name, std::string summary) {
  return std::make_unique<HeadTail>(std::move(name), std::move(summary));
}

std::unique_ptr<Layout> make_load_balanced_layout() {
  return make_head_tail_layout("load_balanced",
                               "head-tail: rank r owns chunks r and 2W-1-r of size P/2W; pads to a multiple of 2W");
}
}  // namespace cpbench
