// thd: packed documents in one flat stream (Transformer Engine's THD partition). Each document is
// padded to a multiple of 2W and split head-tail on its own: rank r owns chunks r and 2W-1-r of every
// document, documents in order. The map depends on the document lengths, so it comes with the shard.
#include "sharders/core/check.hpp"
#include "sharders/layout.hpp"

namespace cpbench {
namespace {
class Thd final : public Layout {
 public:
  std::string name() const override { return "thd"; }
  std::string summary() const override {
    return "packed documents, each padded to a multiple of 2W and split head-tail (TE's THD partition)";
  }
  bool packed() const override { return true; }
  bool data_dependent() const override { return true; }
  int64_t pad_multiple(int64_t cp) const override { return 2 * cp; }
  GlobalLayout compute(const LayoutRequest& req) const override {
    CP_CHECK(req.cp >= 1, "thd: cp must be a positive integer, got ", req.cp);
    std::vector<int64_t> docs = req.doc_lens;
    if (docs.empty()) {
      CP_CHECK(req.seq_len >= 1, "thd: needs document lengths (doc_lens) or a positive seq_len, got seq_len=",
               req.seq_len);
      docs.push_back(req.seq_len);
    }
    GlobalLayout g;
    g.layout = name();
    g.cp = req.cp;
    g.cu_seqlens.push_back(0);
    g.cu_seqlens_padded.push_back(0);
    for (size_t d = 0; d < docs.size(); ++d) {
      CP_CHECK(docs[d] >= 1, "thd: doc_lens[", d, "] must be a positive length, got ", docs[d]);
      g.cu_seqlens.push_back(g.cu_seqlens.back() + docs[d]);
      g.cu_seqlens_padded.push_back(g.cu_seqlens_padded.back() + layout_math::round_up(docs[d], 2 * req.cp));
    }
    g.padded_seq_len = g.cu_seqlens_padded.back();
    for (int64_t r = 0; r < req.cp; ++r) g.ranks.push_back(layout_math::thd(req.cp, g.cu_seqlens_padded, r));
    return g;
  }
};
}  // namespace
std::unique_ptr<Layout> make_thd_layout() { return std::make_unique<Thd>(); }
}  // namespace cpbench
