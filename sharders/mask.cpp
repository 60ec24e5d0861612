#include "sharders/mask.hpp"

#include "sharders/core/check.hpp"
#include "sharders/mask_area.hpp"

namespace cpbench {

namespace {

// Broadcast helpers: [B, N] -> [B, N, 1] (query side) and [B, 1, N] (key side).
at::Tensor as_rows(const at::Tensor& t) { return t.unsqueeze(2); }
at::Tensor as_cols(const at::Tensor& t) { return t.unsqueeze(1); }

at::Tensor narrow_or_undefined(const at::Tensor& t, int64_t dim, int64_t start, int64_t length) {
  return t.defined() ? t.narrow(dim, start, length) : t;
}
at::Tensor to_or_undefined(const at::Tensor& t, const at::Device& device) {
  return t.defined() ? t.to(device) : t;
}
}  // namespace

MaskSpec MaskSpec::parse(const std::string& text) {
  // One grammar for mask text: the layout code's parser (sharders/ sits below kernels/).
  const mask_area::Mask parsed = mask_area::Mask::parse(text);
  static_assert(static_cast<int>(mask_area::Mask::Kind::sliding_window) == static_cast<int>(Kind::sliding_window) &&
                static_cast<int>(mask_area::Mask::Kind::document) == static_cast<int>(Kind::document));
  MaskSpec m;
  m.kind = static_cast<Kind>(static_cast<int>(parsed.kind));
  m.window = parsed.window;
  return m;
}

std::string MaskSpec::to_string() const {
  switch (kind) {
    case Kind::causal: return "causal";
    case Kind::full: return "full";
    case Kind::document: return "document";
    case Kind::sliding_window: return "sliding_window:" + std::to_string(window);
  }
  return "unknown";
}

TokenMeta TokenMeta::to(const at::Device& device) const {
  return TokenMeta{to_or_undefined(pos, device), to_or_undefined(segment, device), to_or_undefined(doc, device),
                   to_or_undefined(valid, device)};
}

TokenMeta TokenMeta::narrow(int64_t dim, int64_t start, int64_t length) const {
  return TokenMeta{narrow_or_undefined(pos, dim, start, length), narrow_or_undefined(segment, dim, start, length),
                   narrow_or_undefined(doc, dim, start, length), narrow_or_undefined(valid, dim, start, length)};
}

at::Tensor build_mask(const MaskSpec& mask, const TokenMeta& q, const TokenMeta& k) {
  CP_CHECK(q.pos.defined() && k.pos.defined(), "build_mask: TokenMeta.pos is required");
  CP_CHECK(q.pos.dim() == 2 && k.pos.dim() == 2 && q.pos.size(0) == k.pos.size(0),
           "build_mask: query pos ", shape_str(q.pos.sizes()), " and key pos ", shape_str(k.pos.sizes()),
           " must both be [B, N] with the same B");
  const auto check_field = [](const at::Tensor& t, const at::Tensor& pos, const char* side, const char* field) {
    CP_CHECK(!t.defined() || t.sizes().equals(pos.sizes()), "build_mask: ", side, " ", field, " has shape ",
             shape_str(t.sizes()), " but pos has ", shape_str(pos.sizes()));
  };
  check_field(q.segment, q.pos, "query", "segment");
  check_field(q.doc, q.pos, "query", "doc");
  check_field(k.segment, k.pos, "key", "segment");
  check_field(k.doc, k.pos, "key", "doc");
  check_field(k.valid, k.pos, "key", "valid");

  const at::Tensor qp = as_rows(q.pos), kp = as_cols(k.pos);
  at::Tensor vis;
  switch (mask.kind) {
    case MaskSpec::Kind::full:
      vis = at::ones({q.pos.size(0), q.pos.size(1), k.pos.size(1)}, q.pos.options().dtype(at::kBool));
      break;
    case MaskSpec::Kind::causal:
      vis = kp <= qp;
      break;
    case MaskSpec::Kind::document:
      vis = kp <= qp;
      // A stream without document ids is one document: the mask is then plain causal.
      if (q.doc.defined() && k.doc.defined()) vis = vis & (as_cols(k.doc) == as_rows(q.doc));
      break;
    case MaskSpec::Kind::sliding_window:
      CP_CHECK(mask.window >= 1, "build_mask: sliding_window needs a window >= 1, got ", mask.window);
      vis = (kp <= qp) & (kp > qp - mask.window);
      break;
  }
  // Undefined segment / valid mean "one segment" / "all valid" (unpacked, unpadded data).
  if (q.segment.defined() && k.segment.defined()) vis = vis & (as_cols(k.segment) == as_rows(q.segment));
  if (k.valid.defined()) vis = vis & as_cols(k.valid.to(at::kBool));
  return vis;
}

}  // namespace cpbench
