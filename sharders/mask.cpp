#include "sharders/mask.hpp"

#include <charconv>
#include <string_view>
#include <utility>

#include "sharders/core/check.hpp"

namespace cpbench {

namespace {
constexpr const char* kKnownMasks = "causal, full, document, sliding_window:N (N >= 1), document+sliding_window:N";
constexpr std::string_view kDocumentsPrefix = "document+";
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
  if (text.starts_with(kDocumentsPrefix)) {
    const std::string rest = text.substr(kDocumentsPrefix.size());
    CP_CHECK_USAGE(rest == "sliding_window" || rest.starts_with(kWindowPrefix), "attention mask '", text,
                   "': only a sliding window is restricted to documents (known: ", kKnownMasks, ")");
    MaskSpec m = parse(rest, window);
    m.documents = true;
    return m;
  }
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
    case Kind::causal:
      return "causal";
    case Kind::full:
      return "full";
    case Kind::document:
      return "document";
    case Kind::sliding_window:
      return (documents ? std::string(kDocumentsPrefix) : std::string()) + "sliding_window:" + std::to_string(window);
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

template <typename T>
MaskSpec::Window<T> MaskSpec::key_window(const T& query_pos) const {
  Window<T> w;
  if (has_upper()) w.hi = query_pos;
  if (has_lower()) w.lo = query_pos - (window - 1);
  return w;
}
template MaskSpec::Window<int64_t> MaskSpec::key_window(const int64_t&) const;
template MaskSpec::Window<at::Tensor> MaskSpec::key_window(const at::Tensor&) const;

template <typename T>
PositionTest<T> position_test(const MaskSpec& mask, const T& q_lo, const T& q_hi, const T& k_lo, const T& k_hi,
                              bool with_every) {
  PositionTest<T> r;
  const auto narrow = [](auto& acc, auto&& cond) {
    if (acc) {
      acc = *acc & cond;
    } else {
      acc = std::forward<decltype(cond)>(cond);
    }
  };
  const auto w_lo = mask.key_window(q_lo), w_hi = mask.key_window(q_hi);
  if (w_hi.hi) {  // key <= hi(query); the lowest key against the highest query decides `some`
    narrow(r.some, k_lo <= *w_hi.hi);
    if (with_every) narrow(r.every, k_hi <= *w_lo.hi);
  }
  if (w_lo.lo) {  // key >= lo(query)
    narrow(r.some, k_hi >= *w_lo.lo);
    if (with_every) narrow(r.every, k_lo >= *w_hi.lo);
  }
  return r;
}

template PositionTest<int64_t> position_test(const MaskSpec&, const int64_t&, const int64_t&, const int64_t&,
                                             const int64_t&, bool);
template PositionTest<at::Tensor> position_test(const MaskSpec&, const at::Tensor&, const at::Tensor&,
                                                const at::Tensor&, const at::Tensor&, bool);

Visibility visibility(const MaskSpec& mask, const RuleBounds& q, const RuleBounds& k, bool with_every) {
  const auto opts = q.pos_lo.options().dtype(at::kBool);
  Visibility v{at::ones({q.pos_lo.size(0), q.pos_lo.size(1), k.pos_lo.size(2)}, opts), at::Tensor()};
  if (with_every) v.every = at::ones_like(v.some);
  const auto narrow = [&](const at::Tensor& some, const at::Tensor& every) {
    v.some.logical_and_(some);
    if (with_every) v.every.logical_and_(every);
  };
  const auto pos = position_test(mask, q.pos_lo, q.pos_hi, k.pos_lo, k.pos_hi, with_every);
  if (pos.some) narrow(*pos.some, with_every ? *pos.every : at::Tensor());
  // Equal values (segment, document): single tokens compare once; groups overlap (some) or are all
  // the same one value (every).
  const auto same = [&](const at::Tensor& qlo, const at::Tensor& qhi, const at::Tensor& klo, const at::Tensor& khi) {
    if (!qlo.defined() || !klo.defined()) return;
    if (qlo.is_same(qhi) && klo.is_same(khi)) {
      const at::Tensor eq = klo == qlo;
      narrow(eq, eq);
      return;
    }
    // Query bounds [B, Nq, 1] and key bounds [B, 1, Nk] broadcast: no in-place op on a one-sided term.
    narrow((klo <= qhi) & (khi >= qlo), with_every ? (qlo == qhi) & (klo == khi) & (klo == qlo) : at::Tensor());
  };
  // A stream without document ids is one document: the document mask is then plain causal.
  if (mask.same_document()) same(q.doc_lo, q.doc_hi, k.doc_lo, k.doc_hi);
  // Undefined segment / valid mean "one segment" / "all valid" (unpacked, unpadded data).
  same(q.segment_lo, q.segment_hi, k.segment_lo, k.segment_hi);
  if (k.valid_any.defined()) narrow(k.valid_any, k.valid_all);
  return v;
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
  if (mask.has_lower()) CP_CHECK(mask.window >= 1, "build_mask: sliding_window needs a window >= 1, got ", mask.window);
  // Single tokens: each bound is the token's own value (the same tensor for lo and hi).
  const auto single = [](const TokenMeta& m, at::Tensor (*side)(const at::Tensor&), bool keys) {
    const auto s = [&](const at::Tensor& t) { return t.defined() ? side(t) : t; };
    RuleBounds b{s(m.pos), {}, s(m.segment), {}, s(m.doc), {}, {}, {}};
    b.pos_hi = b.pos_lo;
    b.segment_hi = b.segment_lo;
    b.doc_hi = b.doc_lo;
    if (keys && m.valid.defined()) b.valid_any = b.valid_all = side(m.valid.to(at::kBool));
    return b;
  };
  return visibility(mask, single(q, as_rows, false), single(k, as_cols, true), false).some;
}

}  // namespace cpbench
