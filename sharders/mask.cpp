#include "sharders/mask.hpp"

#include <charconv>
#include <string_view>

#include "sharders/core/check.hpp"

namespace cpbench {

namespace {
constexpr const char* kKnownMasks = "causal, full, document, sliding_window:N (N >= 1)";
constexpr std::string_view kWindowPrefix = "sliding_window:";

// Broadcast helpers: [B, N] -> [B, N, 1] (query side) and [B, 1, N] (key side).
at::Tensor as_rows(const at::Tensor& t) { return t.unsqueeze(2); }
at::Tensor as_cols(const at::Tensor& t) { return t.unsqueeze(1); }

at::Tensor narrow_or_undefined(const at::Tensor& t, int64_t dim, int64_t start, int64_t length) {
  return t.defined() ? t.narrow(dim, start, length) : t;
}
at::Tensor to_or_undefined(const at::Tensor& t, const at::Device& device) { return t.defined() ? t.to(device) : t; }
at::Tensor select_or_undefined(const at::Tensor& t, int64_t dim, const at::Tensor& index) {
  return t.defined() ? t.index_select(dim, index.to(t.device())) : t;
}
}  // namespace

MaskSpec MaskSpec::parse(const std::string& text, int64_t window) {
  MaskSpec m;
  if (text == "causal") {
    m.kind = Kind::causal;
  } else if (text == "full") {
    m.kind = Kind::full;
  } else if (text == "document") {
    m.kind = Kind::document;
  } else if (text == "sliding_window" || text.starts_with(kWindowPrefix)) {
    m.kind = Kind::sliding_window;
    m.window = window;
    if (text != "sliding_window") {
      const std::string_view digits = std::string_view(text).substr(kWindowPrefix.size());
      int64_t w = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), w);
      CP_CHECK_USAGE(!digits.empty() && ec == std::errc() && end == digits.data() + digits.size(), "attention mask '",
                     text, "': the window after 'sliding_window:' must be a positive integer");
      m.window = w;
    }
    CP_CHECK_USAGE(m.window >= 1, "attention mask '", text, "': sliding_window needs a window >= 1, got ", m.window);
  } else {
    throw UsageError(detail::concat("unknown attention mask '", text, "' (known: ", kKnownMasks, ")"));
  }
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

TokenMeta TokenMeta::index_select(int64_t dim, const at::Tensor& index) const {
  return TokenMeta{select_or_undefined(pos, dim, index), select_or_undefined(segment, dim, index),
                   select_or_undefined(doc, dim, index), select_or_undefined(valid, dim, index)};
}

at::Tensor build_mask(const MaskSpec& mask, const TokenMeta& q, const TokenMeta& k) {
  CP_CHECK(q.pos.defined() && k.pos.defined(), "build_mask: TokenMeta.pos is required");
  CP_CHECK(q.pos.dim() == 2 && k.pos.dim() == 2 && q.pos.size(0) == k.pos.size(0), "build_mask: query pos ",
           shape_str(q.pos.sizes()), " and key pos ", shape_str(k.pos.sizes()), " must both be [B, N] with the same B");
  const auto check_field = [](const at::Tensor& t, const at::Tensor& pos, const char* side, const char* field) {
    CP_CHECK(!t.defined() || t.sizes().equals(pos.sizes()), "build_mask: ", side, " ", field, " has shape ",
             shape_str(t.sizes()), " but pos has ", shape_str(pos.sizes()));
  };
  check_field(q.segment, q.pos, "query", "segment");
  check_field(q.doc, q.pos, "query", "doc");
  check_field(k.segment, k.pos, "key", "segment");
  check_field(k.doc, k.pos, "key", "doc");
  check_field(k.valid, k.pos, "key", "valid");
  if (mask.has_lower())
    CP_CHECK(mask.window >= 1, "build_mask: sliding_window needs a window >= 1, got ", mask.window);

  const at::Tensor qp = as_rows(q.pos), kp = as_cols(k.pos);
  at::Tensor vis = at::ones({q.pos.size(0), q.pos.size(1), k.pos.size(1)}, q.pos.options().dtype(at::kBool));
  if (mask.has_upper()) vis.logical_and_(kp <= mask.upper(qp));
  if (mask.has_lower()) vis.logical_and_(kp >= mask.lower(qp));
  // A stream without document ids is one document: the document mask is then plain causal.
  if (mask.same_document() && q.doc.defined() && k.doc.defined()) vis.logical_and_(as_cols(k.doc) == as_rows(q.doc));
  // Undefined segment / valid mean "one segment" / "all valid" (unpacked, unpadded data).
  if (q.segment.defined() && k.segment.defined()) vis.logical_and_(as_cols(k.segment) == as_rows(q.segment));
  if (k.valid.defined()) vis.logical_and_(as_cols(k.valid.to(at::kBool)));
  return vis;
}

}  // namespace cpbench
