// contiguous: rank r owns [r*L, (r+1)*L), L = P/W. Simple, and badly balanced under a causal mask
// (the last rank does (2W-1)/W of the mean attention work).
#include "sharders/layout.hpp"

namespace cpbench {
namespace {
class Contiguous final : public Layout {
 public:
  std::string name() const override { return "contiguous"; }
  std::string summary() const override { return "rank r owns [r*L, (r+1)*L); pads to a multiple of W"; }
  int64_t pad_multiple(int64_t cp) const override { return cp; }
  GlobalLayout compute(const LayoutRequest& req) const override {
    GlobalLayout g{name(), req.cp, req.seq_len, layout_math::checked_padded_len(*this, req), {}, {}, {}, 1};
    for (int64_t r = 0; r < req.cp; ++r) g.ranks.push_back(layout_math::contiguous(req.cp, g.padded_seq_len, r));
    return g;
  }
};
}  // namespace
std::unique_ptr<Layout> make_contiguous_layout() { return std::make_unique<Contiguous>(); }
}  // namespace cpbench
