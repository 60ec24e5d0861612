// striped (Striped Attention; TE-JAX's THD stripes): token t lives on rank t mod W.
#include "sharders/layout.hpp"

namespace cpbench {
namespace {
class Striped final : public Layout {
 public:
  std::string name() const override { return "striped"; }
  std::string summary() const override { return "token t on rank t mod W; pads to a multiple of W"; }
  int64_t pad_multiple(int64_t cp) const override { return cp; }
  GlobalLayout compute(const LayoutRequest& req) const override {
    GlobalLayout g{name(), req.cp, req.seq_len, layout_math::checked_padded_len(*this, req), {}, {}, {}, 1};
    for (int64_t r = 0; r < req.cp; ++r) g.ranks.push_back(layout_math::striped(req.cp, g.padded_seq_len, r));
    return g;
  }
};
}  // namespace
std::unique_ptr<Layout> make_striped_layout() { return std::make_unique<Striped>(); }
}  // namespace cpbench
