#pragma once
// Layouts: which rank owns which token. Pure index maths on the CPU, no tensors, no communication.
// This is the single source of truth: Sharder's verbs, the transports (through the shard), the
// planner, `cpbench layout` and the tests all call Layout::compute.
//
// Coordinates: a layout partitions the positions [0, padded_seq_len) of one padded global stream.
// For unpacked layouts that stream is one sequence of seq_len tokens right-padded to a multiple of
// pad_multiple(cp). For packed layouts (thd) it is the concatenation of documents, each padded to a
// multiple of pad_multiple(cp); cu_seqlens / cu_seqlens_padded describe it.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sharders/mask.hpp"

namespace cpbench {

// What a layout is asked to partition.
struct LayoutRequest {
  int64_t cp = 1;                 // W, the CP world size (>= 1)
  int64_t seq_len = 0;            // unpacked layouts: tokens per sequence before padding (>= 1)
  std::vector<int64_t> doc_lens;  // packed layouts: stream slot length of each document, in order
  // Data-dependent layouts may use the attention mask the work is balanced for.
  MaskSpec mask;
  int64_t chunk_size = 0;         // data-dependent layouts: 0 = the layout's default
  // Data-dependent unpacked layouts over a batch of rows (workload_balanced): each input row's document
  // lengths (packed from position 0; an empty list = one document filling the row), with seq_len the
  // row length. Two or more rows: the stream holds the rows back to back, each right-padded to the
  // same length (GlobalLayout::rows), and each row's chunks are dispatched on their own. Empty: one row,
  // doc_lens.
  std::vector<std::vector<int64_t>> rows;
};

struct GlobalLayout {
  std::string layout;              // the name of the layout that computed it
  int64_t cp = 1;
  int64_t original_seq_len = -1;   // unpacked: seq_len; packed: -1 (a stream has no single length)
  int64_t padded_seq_len = 0;      // P (all rows: rows x each row's padded length)
  // ranks[r] = global positions (in [0, P)) that rank r owns, in local order; every rank owns P/cp.
  std::vector<std::vector<int64_t>> ranks;
  // Packed layouts (TE convention): cumulative real document lengths, and the document boundaries
  // in the padded stream. Empty for unpacked layouts.
  std::vector<int64_t> cu_seqlens;
  std::vector<int64_t> cu_seqlens_padded;
  // Input rows the stream holds back to back, each padded_seq_len / rows positions long (row b at
  // [b * P / rows, (b + 1) * P / rows)); 1 for every layout but a data-dependent one over a batch.
  int64_t rows = 1;

  [[nodiscard]] int64_t local_len() const { return padded_seq_len / cp; }
  // inverse[p] = index of position p in the rank-order concatenation ranks[0] ++ ranks[1] ++ ...
  [[nodiscard]] std::vector<int64_t> inverse() const;
  // owner[p] = rank owning position p.
  [[nodiscard]] std::vector<int64_t> owners() const;
};

class Layout {
 public:
  virtual ~Layout() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual std::string summary() const = 0;
  // true: documents are padded one by one into a flat stream (needs doc_lens). Otherwise the
  // sequence is padded at its end.
  [[nodiscard]] virtual bool packed() const { return false; }
  // true: the map depends on the data (document lengths, mask) and arrives with the shard; token
  // verbs raise before the first shard.
  [[nodiscard]] virtual bool data_dependent() const { return false; }
  // The multiple the sequence (unpacked) or each document (packed) is padded to.
  [[nodiscard]] virtual int64_t pad_multiple(int64_t cp) const = 0;
  // Validates the request (throws cpbench::Error naming the bad field) and partitions the stream.
  [[nodiscard]] virtual GlobalLayout compute(const LayoutRequest& request) const = 0;
};

// load_balanced's head-tail layout under another sharder's name (sdpa_wrap differs from
// load_balanced only in how attention is reached: their registry entries say how).
[[nodiscard]] std::unique_ptr<Layout> make_head_tail_layout(std::string name, std::string summary);

namespace layout_math {
[[nodiscard]] int64_t round_up(int64_t n, int64_t multiple);
// Closed forms over a padded length P (P must be a multiple of the layout's pad multiple).
[[nodiscard]] std::vector<int64_t> contiguous(int64_t cp, int64_t P, int64_t rank);
// Head-tail: chunks rank and 2cp-1-rank of size P/(2cp), in that order.
[[nodiscard]] std::vector<int64_t> head_tail(int64_t cp, int64_t P, int64_t rank);
[[nodiscard]] std::vector<int64_t> striped(int64_t cp, int64_t P, int64_t rank);
// Per-document head-tail over padded document boundaries (Transformer Engine's THD partition).
[[nodiscard]] std::vector<int64_t> thd(int64_t cp, const std::vector<int64_t>& cu_seqlens_padded, int64_t rank);
// Validates the common request fields for unpacked layouts; returns P.
[[nodiscard]] int64_t checked_padded_len(const Layout& layout, const LayoutRequest& request);
}  // namespace layout_math

}  // namespace cpbench
