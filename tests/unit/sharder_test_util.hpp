#pragma once
// Index-addressed test batches for the sharder tests, and the expected padded global stream built
// element by element from the pad rule in DESIGN.md (independently of sharders/'s pad helpers).
//
// Every value is a function of (key, b, s[, h]): a wrong slice, a wrong order or a wrong pad value
// shows up as a mismatch at a position the failure message names.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <utility>
#include <string>
#include <vector>

#include "sharders/core/check.hpp"
#include "sharders/layout.hpp"
#include "sharders/registry.hpp"
#include "sharders/sharder.hpp"

namespace cpbench::test {

inline constexpr int64_t kPadId = -7;      // padding_token_id used by the tests (never a real id)
inline constexpr int64_t kDocIdFill = -5;  // fill of the int extra "doc_ids"
inline constexpr int64_t kSeqFirstFill = 9;

enum class Positions { none, bs, one_s, mrope };

struct BatchSpec {
  int64_t B = 2, S = 8, H = 3, V = 4;
  bool embeds = false;  // inputs_embeds instead of input_ids
  Positions positions = Positions::bs;
  bool loss_mask = true;
  bool padding_mask = true;
  bool extras = true;
  bool seq_first_extra = true;  // an extra with seq_dim 0 (unpacked layouts only)
};

// Value functions (b = row, s = column in the input row).
inline int64_t id_at(int64_t b, int64_t s) { return 1000 * (b + 1) + s; }
inline int64_t label_at(int64_t b, int64_t s) { return 50000 + 1000 * b + s; }
inline float embed_at(int64_t b, int64_t s, int64_t h) { return static_cast<float>(100 * b + s) + 0.25f * static_cast<float>(h); }
inline int64_t pos_at(int64_t b, int64_t s) { return 10 + 3 * b + s; }
inline int64_t pos_one_at(int64_t s) { return 7 + s; }
inline int64_t mrope_at(int64_t c, int64_t b, int64_t s) { return 100 * c + 10 * b + s; }
inline float loss_mask_at(int64_t b, int64_t s) { return 0.5f * static_cast<float>((b + s) % 3); }
inline bool padding_mask_at(int64_t, int64_t s) { return s % 5 == 4; }
inline float teacher_at(int64_t b, int64_t s, int64_t v) { return static_cast<float>(1000 * b + s) + 0.125f * static_cast<float>(v); }
inline int64_t doc_id_at(int64_t b, int64_t s) { return 7 * b + s + 1; }
inline int64_t seq_first_at(int64_t s, int64_t j) { return 10 * s + j; }

inline at::Tensor make_2d(int64_t B, int64_t S, at::ScalarType dt, const std::function<double(int64_t, int64_t)>& f) {
  at::Tensor t = at::empty({B, S}, at::kDouble);
  auto a = t.accessor<double, 2>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) a[b][s] = f(b, s);
  return t.to(dt);
}

inline at::Tensor make_3d(int64_t A, int64_t B, int64_t C, at::ScalarType dt,
                          const std::function<double(int64_t, int64_t, int64_t)>& f) {
  at::Tensor t = at::empty({A, B, C}, at::kDouble);
  auto a = t.accessor<double, 3>();
  for (int64_t i = 0; i < A; ++i)
    for (int64_t j = 0; j < B; ++j)
      for (int64_t k = 0; k < C; ++k) a[i][j][k] = f(i, j, k);
  return t.to(dt);
}

inline Batch make_batch(const BatchSpec& sp) {
  const int64_t B = sp.B, S = sp.S;
  Batch batch;
  if (sp.embeds)
    batch.inputs_embeds = make_3d(B, S, sp.H, at::kFloat, [](int64_t b, int64_t s, int64_t h) { return embed_at(b, s, h); });
  else
    batch.input_ids = make_2d(B, S, at::kLong, [](int64_t b, int64_t s) { return static_cast<double>(id_at(b, s)); });
  batch.labels = make_2d(B, S, at::kLong, [](int64_t b, int64_t s) { return static_cast<double>(label_at(b, s)); });
  switch (sp.positions) {
    case Positions::none: break;
    case Positions::bs:
      batch.position_ids = make_2d(B, S, at::kLong, [](int64_t b, int64_t s) { return static_cast<double>(pos_at(b, s)); });
      break;
    case Positions::one_s:
      batch.position_ids = make_2d(1, S, at::kLong, [](int64_t, int64_t s) { return static_cast<double>(pos_one_at(s)); });
      break;
    case Positions::mrope:
      batch.position_ids =
          make_3d(3, B, S, at::kLong, [](int64_t c, int64_t b, int64_t s) { return static_cast<double>(mrope_at(c, b, s)); });
      break;
  }
  if (sp.loss_mask) batch.loss_mask = make_2d(B, S, at::kFloat, [](int64_t b, int64_t s) { return loss_mask_at(b, s); });
  if (sp.padding_mask)
    batch.padding_mask = make_2d(B, S, at::kBool, [](int64_t b, int64_t s) { return padding_mask_at(b, s) ? 1.0 : 0.0; });
  if (sp.extras) {
    batch.extras["teacher_logits"] = ExtraBuffer{
        make_3d(B, S, sp.V, at::kFloat, [](int64_t b, int64_t s, int64_t v) { return teacher_at(b, s, v); }), 1, std::nullopt};
    batch.extras["doc_ids"] = ExtraBuffer{
        make_2d(B, S, at::kLong, [](int64_t b, int64_t s) { return static_cast<double>(doc_id_at(b, s)); }), 1,
        at::Scalar(kDocIdFill)};
  }
  if (sp.seq_first_extra)
    batch.extras["seq_first"] = ExtraBuffer{
        make_2d(S, 2, at::kLong, [](int64_t s, int64_t j) { return static_cast<double>(seq_first_at(s, j)); }), 0,
        at::Scalar(kSeqFirstFill)};
  return batch;
}

// One token-aligned key of a batch, how to find it, and on which dim its sequence runs.
struct Key {
  std::string name;
  int64_t seq_dim;
  std::function<std::optional<at::Tensor>(const Batch&)> get;
  std::optional<at::Scalar> fill;  // the pad rule's fill (nullopt: position_ids, which count on)
};

inline std::vector<Key> keys_of(const Batch& in) {
  std::vector<Key> keys;
  if (in.input_ids) keys.push_back({"input_ids", 1, [](const Batch& b) { return b.input_ids; }, at::Scalar(kPadId)});
  if (in.inputs_embeds) keys.push_back({"inputs_embeds", 1, [](const Batch& b) { return b.inputs_embeds; }, at::Scalar(0.0)});
  keys.push_back({"labels", 1, [](const Batch& b) { return b.labels; }, at::Scalar(kIgnoreIndex)});
  if (in.loss_mask) keys.push_back({"loss_mask", 1, [](const Batch& b) { return b.loss_mask; }, at::Scalar(0.0)});
  if (in.padding_mask) keys.push_back({"padding_mask", 1, [](const Batch& b) { return b.padding_mask; }, at::Scalar(true)});
  if (in.position_ids)
    keys.push_back({"position_ids", in.position_ids->dim() == 3 ? int64_t{2} : int64_t{1},
                    [](const Batch& b) { return b.position_ids; }, std::nullopt});
  for (const auto& [name, ex] : in.extras) {
    const std::string n = name;
    keys.push_back({"extras['" + name + "']", ex.seq_dim,
                    [n](const Batch& b) -> std::optional<at::Tensor> {
                      auto it = b.extras.find(n);
                      if (it == b.extras.end()) return std::nullopt;
                      return it->second.tensor;
                    },
                    ex.fill.value_or(at::Scalar(0))});
  }
  return keys;
}

// Unpacked: the expected padded global value of a key. `t` is the input tensor; positions p >= S get
// `fill`, or (no fill: position ids) the last real position plus p - S + 1.
inline at::Tensor expected_padded(const at::Tensor& t, int64_t seq_dim, int64_t P, const std::optional<at::Scalar>& fill) {
  const int64_t S = t.size(seq_dim);
  std::vector<int64_t> shape = t.sizes().vec();
  shape[static_cast<size_t>(seq_dim)] = P;
  at::Tensor src = t.to(at::kDouble);
  at::Tensor out = at::empty(shape, at::kDouble);
  out.narrow(seq_dim, 0, S).copy_(src);
  for (int64_t p = S; p < P; ++p) {
    if (fill)
      out.select(seq_dim, p).fill_(*fill);
    else
      out.select(seq_dim, p).copy_(src.select(seq_dim, S - 1) + static_cast<double>(p - S + 1));
  }
  return out.to(t.scalar_type());
}

// ---- thd: documents per row, and the padded stream they become (built here, not by the sharder) ----
struct DocSpec {
  int64_t real, slot;  // real length, slot width in the input row (>= real)
};
using RowDocs = std::vector<std::vector<DocSpec>>;  // documents of each row, in order

struct StreamSlot {
  int64_t row, col;  // input token it holds; col = -1: a new pad slot (no input token)
  int64_t doc, k;    // document index in the stream, offset within its padded document
  int64_t real, slot, last_col;  // the document's real length, slot width, input column of its last slot
};

struct StreamPlan {
  std::vector<StreamSlot> slots;  // one per stream position, size P
  std::vector<int64_t> cu_real{0}, cu_padded{0};
  int64_t max_padded = 0;
  std::vector<int64_t> input_pos;  // [B*S]: input (b, s) -> stream position, -1 = dropped
  bool identity = true;            // stream == flattened rows
  [[nodiscard]] int64_t P() const { return static_cast<int64_t>(slots.size()); }
};

// The default thd trailing rule (fold): a row's trailing padding joins its last document's slot; a
// row without documents joins the previous document (slots may then run past the row end, in flat
// coordinates b * S + col).
inline RowDocs fold_trailing(RowDocs rows, int64_t S) {
  DocSpec* prev = nullptr;
  for (auto& row : rows) {
    if (row.empty()) {
      if (prev) prev->slot += S;
      continue;
    }
    int64_t off = 0;
    for (size_t d = 0; d + 1 < row.size(); ++d) off += row[d].slot;
    row.back().slot = S - off;
    prev = &row.back();
  }
  return rows;
}

inline StreamPlan plan_stream(int64_t W, int64_t B, int64_t S, const RowDocs& rows_in, bool fold = true) {
  const RowDocs rows = fold ? fold_trailing(rows_in, S) : rows_in;
  StreamPlan plan;
  plan.input_pos.assign(static_cast<size_t>(B * S), -1);
  int64_t doc = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t off = 0;
    for (const auto& d : rows[static_cast<size_t>(b)]) {
      const int64_t n = (d.slot + 2 * W - 1) / (2 * W) * (2 * W);
      for (int64_t k = 0; k < n; ++k) {
        const int64_t col = k < d.slot ? off + k : -1;
        if (col >= 0) plan.input_pos[static_cast<size_t>(b * S + col)] = plan.P();
        plan.slots.push_back({b, col, doc, k, d.real, d.slot, off + d.slot - 1});
      }
      plan.cu_real.push_back(plan.cu_real.back() + d.real);
      plan.cu_padded.push_back(plan.cu_padded.back() + n);
      plan.max_padded = std::max(plan.max_padded, n);
      off += d.slot;
      ++doc;
    }
  }
  plan.identity = plan.P() == B * S;
  for (int64_t p = 0; plan.identity && p < plan.P(); ++p) {
    const auto& sl = plan.slots[static_cast<size_t>(p)];
    plan.identity = sl.col >= 0 && sl.row * S + sl.col == p;
  }
  return plan;
}

// seq_lens / seq_lens_padded [B, D] with the -1000 sentinel.
inline std::pair<at::Tensor, at::Tensor> seq_lens_of(const RowDocs& rows) {
  size_t D = 1;
  for (const auto& r : rows) D = std::max(D, r.size());
  at::Tensor lens = at::full({static_cast<int64_t>(rows.size()), static_cast<int64_t>(D)}, kSeqLensSentinel, at::kLong);
  at::Tensor slots = lens.clone();
  for (size_t b = 0; b < rows.size(); ++b)
    for (size_t d = 0; d < rows[b].size(); ++d) {
      lens[static_cast<int64_t>(b)][static_cast<int64_t>(d)] = rows[b][d].real;
      slots[static_cast<int64_t>(b)][static_cast<int64_t>(d)] = rows[b][d].slot;
    }
  return {lens, slots};
}

// The expected stream value of a key whose dims (seq_dim-1, seq_dim) are [B, S]: those dims become
// [1, P]; new pad slots get `fill`, or (no fill: position ids) the document's last slot value + offset.
inline at::Tensor expected_stream(const at::Tensor& t, int64_t seq_dim, const StreamPlan& plan, int64_t S,
                                  const std::optional<at::Scalar>& fill) {
  const int64_t q = seq_dim - 1;
  at::Tensor flat = t.to(at::kDouble).flatten(q, seq_dim);
  std::vector<int64_t> idx;
  for (const auto& sl : plan.slots) idx.push_back(sl.col >= 0 ? sl.row * S + sl.col : 0);
  at::Tensor out = flat.index_select(q, at::tensor(at::ArrayRef<int64_t>(idx), at::kLong));
  for (int64_t p = 0; p < plan.P(); ++p) {
    const auto& sl = plan.slots[static_cast<size_t>(p)];
    if (sl.col >= 0) continue;
    if (fill)
      out.select(q, p).fill_(*fill);
    else
      out.select(q, p).copy_(flat.select(q, sl.row * S + sl.last_col) + static_cast<double>(sl.k - sl.slot + 1));
  }
  return out.unsqueeze(q).to(t.scalar_type());
}

// [1, P] int64: offset of each stream position in its document (synthesized thd position ids).
inline at::Tensor expected_stream_offsets(const StreamPlan& plan) {
  at::Tensor out = at::empty({1, plan.P()}, at::kLong);
  for (int64_t p = 0; p < plan.P(); ++p) out[0][p] = plan.slots[static_cast<size_t>(p)].k;
  return out;
}

// [1, P] bool: the pack layout's padding (offset >= real length) or-ed with the input mask (if any).
inline at::Tensor expected_stream_padding(const StreamPlan& plan, const std::optional<at::Tensor>& in_mask) {
  at::Tensor out = at::empty({1, plan.P()}, at::kBool);
  for (int64_t p = 0; p < plan.P(); ++p) {
    const auto& sl = plan.slots[static_cast<size_t>(p)];
    bool pad = sl.col < 0 || sl.k >= sl.real;
    if (!pad && in_mask) pad = (*in_mask)[sl.row][sl.col].item<bool>();
    out[0][p] = pad;
  }
  return out;
}

// An input-row tensor ([B, S] on dims (seq_dim-1, seq_dim)) with its dropped slots set to `fill`.
inline at::Tensor with_dropped(const at::Tensor& t, int64_t seq_dim, const StreamPlan& plan, int64_t B, int64_t S,
                               const at::Scalar& fill) {
  at::Tensor out = t.clone();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      if (plan.input_pos[static_cast<size_t>(b * S + s)] < 0) out.select(seq_dim - 1, b).select(seq_dim - 1, s).fill_(fill);
  return out;
}

inline std::vector<int64_t> to_vec(const at::Tensor& t) {
  at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

inline at::Tensor idx_tensor(const std::vector<int64_t>& v) {
  return at::tensor(at::ArrayRef<int64_t>(v), at::kLong);
}

// Exact equality with a readable first mismatch.
inline ::testing::AssertionResult same(const at::Tensor& actual, const at::Tensor& expected) {
  if (actual.sizes() != expected.sizes())
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.sizes()) << " != expected "
                                         << shape_str(expected.sizes());
  if (actual.scalar_type() != expected.scalar_type())
    return ::testing::AssertionFailure() << "dtype " << actual.scalar_type() << " != expected " << expected.scalar_type();
  if (actual.numel() == 0 || at::equal(actual, expected)) return ::testing::AssertionSuccess();
  at::Tensor diff = (actual.to(at::kDouble) != expected.to(at::kDouble)).flatten().nonzero();
  const int64_t first = diff[0][0].item<int64_t>();
  std::vector<int64_t> coord(static_cast<size_t>(actual.dim()));
  int64_t rem = first;
  for (int64_t d = actual.dim() - 1; d >= 0; --d) {
    coord[static_cast<size_t>(d)] = rem % actual.size(d);
    rem /= actual.size(d);
  }
  return ::testing::AssertionFailure() << diff.size(0) << " mismatches; first at " << shape_str(coord) << ": got "
                                       << actual.to(at::kDouble).flatten()[first].item<double>() << ", expected "
                                       << expected.to(at::kDouble).flatten()[first].item<double>();
}

// Runs fn and returns the message of the cpbench::Error it throws (fails the test if none).
template <typename E = Error, typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong exception type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

inline ::testing::AssertionResult contains_all(const std::string& msg, const std::vector<std::string>& parts) {
  for (const auto& p : parts)
    if (msg.find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "message lacks \"" << p << "\": " << msg;
  return ::testing::AssertionSuccess();
}

inline std::vector<Sharder> sharders_for(const std::string& name, int64_t W, int64_t pad_id = kPadId,
                                         SharderOptions base = {}) {
  auto layout = make_layout(name);
  std::vector<Sharder> out;
  for (int64_t r = 0; r < W; ++r) {
    SharderOptions o = base;
    o.cp_size = W;
    o.cp_rank = r;
    o.padding_token_id = pad_id;
    out.emplace_back(layout, o);
  }
  return out;
}

}  // namespace cpbench::test
