// sdpa_wrap: the compile-safe SDPA wrap. Its layout is load_balanced's; what differs is how attention
// is reached: the CP transport is installed at the model's SDPA hook point for each forward and the
// original restored afterwards (also on exceptions), so the collective is explicit at the call site.
#include "sharders/layout.hpp"

namespace cpbench {
namespace {
class SdpaWrap final : public Layout {
 public:
  std::string name() const override { return "sdpa_wrap"; }
  std::string summary() const override {
    return "load_balanced layout; CP transport installed at the SDPA hook point per forward";
  }
  int64_t pad_multiple(int64_t cp) const override { return 2 * cp; }
  Attention attention() const override { return Attention::sdpa_hook; }
  GlobalLayout compute(const LayoutRequest& req) const override {
    GlobalLayout g{name(), req.cp, req.seq_len, layout_math::checked_padded_len(*this, req), {}, {}, {}};
    for (int64_t r = 0; r < req.cp; ++r) g.ranks.push_back(layout_math::head_tail(req.cp, g.padded_seq_len, r));
    return g;
  }
};
}  // namespace
std::unique_ptr<Layout> make_sdpa_wrap_layout() { return std::make_unique<SdpaWrap>(); }
}  // namespace cpbench
