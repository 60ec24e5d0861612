// local_only: the broken variant the compile-safe SDPA wrap protects against, shipped as a negative
// control. It shards exactly like load_balanced but attention sees only the local keys (what happens
// when a compiled graph captures the plain SDPA call and the CP dispatch never fires). The reference
// check must catch it; scenarios run it with `expect: mismatch`.
#include "sharders/layout.hpp"

namespace cpbench {
namespace {
class LocalOnly final : public Layout {
 public:
  std::string name() const override { return "local_only"; }
  std::string summary() const override {
    return "negative control: load_balanced layout, but attention sees only local keys (wrong on purpose)";
  }
  int64_t pad_multiple(int64_t cp) const override { return 2 * cp; }
  Attention attention() const override { return Attention::local_only; }
  GlobalLayout compute(const LayoutRequest& req) const override {
    GlobalLayout g{name(), req.cp, req.seq_len, layout_math::checked_padded_len(*this, req), {}, {}, {}};
    for (int64_t r = 0; r < req.cp; ++r) g.ranks.push_back(layout_math::head_tail(req.cp, g.padded_seq_len, r));
    return g;
  }
};
}  // namespace
std::unique_ptr<Layout> make_local_only_layout() { return std::make_unique<LocalOnly>(); }
}  // namespace cpbench
