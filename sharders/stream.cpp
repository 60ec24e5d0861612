#include "sharders/stream.hpp"

#include <algorithm>

#include "sharders/core/check.hpp"

namespace cpbench {

namespace {
constexpr int64_t kMaxPositions = int64_t{1} << 31;

// valid_prefix over the coordinate axis [0, X) of every segment.
void build_prefix(Stream& s) {
  int64_t X = 0, G = 1;
  for (const auto& t : s.tokens) {
    X = std::max<int64_t>(X, t.pos + 1);
    G = std::max<int64_t>(G, t.segment + 1);
  }
  s.extent = X;
  s.segments = G;
  const auto row = static_cast<size_t>(X + 1);
  s.valid_prefix.assign(static_cast<size_t>(G) * row, 0);
  for (const auto& t : s.tokens)
    if (t.valid) s.valid_prefix[static_cast<size_t>(t.segment) * row + static_cast<size_t>(t.pos + 1)] += 1;
  for (size_t g = 0; g < static_cast<size_t>(G); ++g)
    for (size_t x = 1; x < row; ++x) s.valid_prefix[g * row + x] += s.valid_prefix[g * row + x - 1];
}

void check_length(int64_t P) {
  CP_CHECK(P < kMaxPositions, "a stream of ", P, " positions is too long (at most ", kMaxPositions - 1, ")");
}
}  // namespace

int64_t Stream::valid_tokens() const {
  int64_t n = 0;
  for (int64_t g = 0; g < segments; ++g) n += valid_prefix[static_cast<size_t>(g * (extent + 1) + extent)];
  return n;
}

TokenMeta Stream::token_meta(const std::vector<int64_t>& positions) const {
  const auto n = static_cast<int64_t>(positions.size());
  at::Tensor pos = at::empty({1, n}, at::kLong), seg = at::empty({1, n}, at::kLong), doc = at::empty({1, n}, at::kLong);
  at::Tensor valid = at::empty({1, n}, at::kBool);
  int64_t *pp = pos.data_ptr<int64_t>(), *sp = seg.data_ptr<int64_t>(), *dp = doc.data_ptr<int64_t>();
  bool* vp = valid.data_ptr<bool>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = positions[static_cast<size_t>(i)];
    CP_CHECK(p >= 0 && p < padded_len, "stream position ", p, " is outside the stream of ", padded_len, " positions");
    const Token& t = tokens[static_cast<size_t>(p)];
    pp[i] = t.pos;
    sp[i] = t.segment;
    dp[i] = t.doc;
    vp[i] = t.valid != 0;
  }
  return TokenMeta{pos, seg, doc, valid};
}

Stream unpacked_stream(int64_t seq_len, const std::vector<DocSpan>& docs, int64_t padded_len,
                       const uint8_t* input_padding) {
  CP_CHECK(seq_len >= 1, "stream: seq_len must be a positive length, got ", seq_len);
  CP_CHECK(seq_len <= padded_len, "seq_len ", seq_len, " exceeds the padded length ", padded_len);
  check_length(padded_len);
  Stream s;
  const auto P = static_cast<size_t>(padded_len);
  s.padded_len = padded_len;
  s.tokens.resize(P);
  for (size_t p = 0; p < P; ++p) s.tokens[p].pos = static_cast<int32_t>(p);
  int64_t end_of_previous = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    const DocSpan& doc = docs[d];
    CP_CHECK(doc.real >= 1, "doc_lens[", d, "] must be a positive length, got ", doc.real);
    CP_CHECK(doc.offset >= end_of_previous, "document ", d, " starts at row position ", doc.offset,
             ", inside the previous document (which ends at ", end_of_previous, ")");
    CP_CHECK(doc.offset + doc.real <= seq_len, "documents need ", doc.offset + doc.real,
             " tokens, more than seq_len ", seq_len);
    for (int64_t p = doc.offset; p < doc.offset + doc.real; ++p) {
      auto& t = s.tokens[static_cast<size_t>(p)];
      t.doc = static_cast<int32_t>(d);
      t.doc_lo = static_cast<int32_t>(doc.offset);
      t.doc_hi = static_cast<int32_t>(doc.offset + doc.real - 1);
      t.valid = input_padding == nullptr || input_padding[p] == 0;
    }
    end_of_previous = doc.offset + std::max(doc.real, doc.slot);
  }
  build_prefix(s);
  return s;
}

Stream unpacked_stream(int64_t seq_len, const std::vector<int64_t>& doc_lens, int64_t padded_len) {
  std::vector<DocSpan> docs;
  if (doc_lens.empty()) docs.push_back({0, 0, seq_len, seq_len});
  int64_t offset = 0;
  for (int64_t len : doc_lens) {
    docs.push_back({0, offset, len, len});
    offset += std::max<int64_t>(len, 0);
  }
  return unpacked_stream(seq_len, docs, padded_len);
}

Stream packed_stream(const std::vector<DocSpan>& docs, const std::vector<int64_t>& cu_real,
                     const std::vector<int64_t>& cu_padded, int64_t row_len, const uint8_t* input_padding) {
  CP_CHECK(!cu_padded.empty() && cu_real.size() == cu_padded.size() && docs.size() + 1 == cu_padded.size(),
           "packed stream: cu_seqlens ", shape_str(cu_real), " and cu_seqlens_padded ", shape_str(cu_padded),
           " must both hold one boundary more than the ", docs.size(), " documents");
  CP_CHECK(cu_real.front() == 0 && cu_padded.front() == 0, "packed stream: cu_seqlens ", shape_str(cu_real),
           " and cu_seqlens_padded ", shape_str(cu_padded), " must start at 0");
  Stream s;
  s.padded_len = cu_padded.back();
  check_length(s.padded_len);
  s.tokens.resize(static_cast<size_t>(s.padded_len));
  for (size_t d = 0; d < docs.size(); ++d) {
    const DocSpan& doc = docs[d];
    const int64_t start = cu_padded[d], end = cu_padded[d + 1], real = cu_real[d + 1] - cu_real[d];
    CP_CHECK(real == doc.real, "packed stream: cu_seqlens gives document ", d, " ", real,
             " real tokens, but the document has ", doc.real);
    CP_CHECK(start <= end && real <= end - start, "packed stream: document ", d, " has ", real,
             " real tokens in a slot of ", end - start, " (cu_seqlens_padded ", shape_str(cu_padded), ")");
    if (doc.row != docs.front().row) s.single_segment = false;
    for (int64_t p = start; p < end; ++p) {
      const int64_t k = p - start;
      const int64_t flat = doc.row * row_len + doc.offset + k;  // the input slot, while inside the row slot
      const bool input_pad = input_padding != nullptr && k < doc.slot && input_padding[flat] != 0;
      s.tokens[static_cast<size_t>(p)] = {static_cast<int32_t>(doc.offset + k), static_cast<int32_t>(doc.row),
                                          static_cast<int32_t>(d), static_cast<int32_t>(doc.offset),
                                          static_cast<int32_t>(doc.offset + doc.real - 1), k < real && !input_pad};
    }
  }
  build_prefix(s);
  return s;
}

Stream packed_stream(const std::vector<int64_t>& cu_real, const std::vector<int64_t>& cu_padded) {
  CP_CHECK(!cu_real.empty(), "packed stream: cu_seqlens must hold at least the leading 0");
  std::vector<DocSpan> docs;
  for (size_t d = 0; d + 1 < cu_real.size(); ++d) {
    const int64_t real = cu_real[d + 1] - cu_real[d];
    docs.push_back({0, cu_real[d], real, real});
  }
  return packed_stream(docs, cu_real, cu_padded, cu_real.back());
}

Stream rows_stream(const std::vector<Stream>& rows) {
  CP_CHECK(!rows.empty(), "rows stream: needs at least one row");
  const int64_t L = rows.front().padded_len;
  Stream s;
  s.padded_len = L * static_cast<int64_t>(rows.size());
  check_length(s.padded_len);
  s.tokens.reserve(static_cast<size_t>(s.padded_len));
  int32_t docs = 0;
  for (size_t b = 0; b < rows.size(); ++b) {
    CP_CHECK(rows[b].padded_len == L, "rows stream: row ", b, " has ", rows[b].padded_len, " positions, row 0 has ", L);
    int32_t row_docs = 0;
    for (Stream::Token t : rows[b].tokens) {
      t.segment = static_cast<int32_t>(b);
      if (t.doc >= 0) {
        row_docs = std::max(row_docs, t.doc + 1);
        t.doc += docs;
      }
      s.tokens.push_back(t);
    }
    docs += row_docs;
  }
  s.single_segment = rows.size() == 1;
  build_prefix(s);
  return s;
}

Stream stream_of(const GlobalLayout& g, const std::vector<int64_t>& doc_lens,
                 const std::vector<std::vector<int64_t>>& rows) {
  if (!g.cu_seqlens_padded.empty()) return packed_stream(g.cu_seqlens, g.cu_seqlens_padded);
  if (g.rows <= 1) return unpacked_stream(g.original_seq_len, rows.empty() ? doc_lens : rows.front(), g.padded_seq_len);
  CP_CHECK(static_cast<int64_t>(rows.size()) == g.rows, "stream_of: the layout holds ", g.rows, " rows, ", rows.size(),
           " rows of documents given");
  std::vector<Stream> parts;
  for (const auto& r : rows) parts.push_back(unpacked_stream(g.original_seq_len, r, g.padded_seq_len / g.rows));
  return rows_stream(parts);
}

}  // namespace cpbench
