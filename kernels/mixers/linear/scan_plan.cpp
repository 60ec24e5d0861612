#include "kernels/mixers/linear/scan_plan.hpp"

#include <algorithm>
#include <atomic>
#include <limits>

#include "sharders/core/check.hpp"

namespace cpbench {

namespace {
std::atomic<int64_t> host_tensors_built{0};
}  // namespace

int64_t linear_host_tensors_built() { return host_tensors_built.load(); }

at::Tensor linear_host_tensor(const std::vector<int64_t>& v, const at::Device& device) {
  ++host_tensors_built;
  return at::tensor(v, at::kLong).to(device);
}

// The masked values may be large positive decay sums (s > t), so they are replaced before exp, not
// after: exp would overflow and 0 * inf is NaN, in the values and in the gradients.
at::Tensor masked_exp(const at::Tensor& keep, const at::Tensor& v) {
  return at::exp(at::where(keep, v, at::full({}, -std::numeric_limits<double>::infinity(), v.options())));
}

at::Tensor pad_sequence(const at::Tensor& t, int64_t extra) {
  if (extra == 0) return t;
  std::vector<int64_t> pad(static_cast<size_t>(2 * (t.dim() - 1)), 0);  // from the last dim backwards
  pad.back() = extra;
  return at::constant_pad_nd(t, pad, 0);
}

at::ScalarType recurrence_dtype(at::ScalarType activations) {
  return (activations == at::kBFloat16 || activations == at::kHalf) ? at::kFloat : activations;
}

ScanPlan make_scan_plan(const TokenMeta& meta, bool document_reset, int64_t conv, at::ScalarType dtype,
                        const at::Device& device) {
  const at::Tensor seg = meta.segment.to(at::kCPU, at::kLong).contiguous();
  const at::Tensor doc = meta.doc.to(at::kCPU, at::kLong).contiguous();
  const at::Tensor val = meta.valid.to(at::kCPU, at::kBool).contiguous();
  const int64_t R = seg.size(0), L = seg.size(1), K = conv;
  std::vector<int64_t> group(static_cast<size_t>(R * L)), src(static_cast<size_t>(R * L * K));
  std::vector<int64_t> valid(static_cast<size_t>(R * L));
  const int64_t* sp = seg.data_ptr<int64_t>();
  const int64_t* dp = doc.data_ptr<int64_t>();
  const bool* vp = val.data_ptr<bool>();
  int64_t next_group = 0;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t zero_row = r * (L + 1) + L;  // the zero row appended to row r's input
    std::vector<int64_t> window;               // the group's last K-1 real tokens (flat input rows)
    bool have_key = false;
    int64_t key_seg = 0, key_doc = 0, current = next_group++;
    for (int64_t t = 0; t < L; ++t) {
      const size_t i = static_cast<size_t>(r * L + t);
      const bool real = vp[i];
      if (real) {
        const int64_t d = document_reset ? dp[i] : 0;
        if (!have_key || sp[i] != key_seg || d != key_doc) {
          current = next_group++;
          window.clear();
          have_key = true;
          key_seg = sp[i];
          key_doc = d;
        }
      }
      group[i] = current;
      valid[i] = real ? 1 : 0;
      // Taps k = K-1 (this token), K-2 (the previous real one), ...; pad slots read zeros only.
      for (int64_t k = 0; k < K; ++k) src[i * static_cast<size_t>(K) + static_cast<size_t>(k)] = zero_row;
      if (real) {
        src[i * static_cast<size_t>(K) + static_cast<size_t>(K - 1)] = r * (L + 1) + t;
        for (size_t m = 0; m < window.size(); ++m)
          src[i * static_cast<size_t>(K) + static_cast<size_t>(K - 2) - m] = window[window.size() - 1 - m];
        window.push_back(r * (L + 1) + t);
        if (static_cast<int64_t>(window.size()) > K - 1) window.erase(window.begin());
      }
    }
  }
  ScanPlan p;
  p.rows = R;
  p.length = L;
  p.group = linear_host_tensor(group, device).view({R, L});
  p.valid = linear_host_tensor(valid, device).view({R, L}).to(dtype);
  p.conv_src = linear_host_tensor(src, device);
  return p;
}

std::vector<std::pair<int64_t, int64_t>> contiguous_runs(const std::vector<int64_t>& positions) {
  std::vector<std::pair<int64_t, int64_t>> runs;
  const auto n = static_cast<int64_t>(positions.size());
  for (int64_t i = 0; i < n; ++i) {
    if (i == 0 || positions[static_cast<size_t>(i)] != positions[static_cast<size_t>(i - 1)] + 1)
      runs.emplace_back(i, i + 1);
    else
      runs.back().second = i + 1;
  }
  return runs;
}

int64_t max_runs_per_rank(const GlobalLayout& g) {
  int64_t most = 0;
  for (const auto& r : g.ranks) most = std::max<int64_t>(most, static_cast<int64_t>(contiguous_runs(r).size()));
  return most;
}

std::string state_passing_unsupported_reason(const Layout& layout, int64_t cp, const std::string& axis) {
  if (cp <= 1) return "";
  // Lengths that every layout pads to without rounding (multiples of 2W and of workload_balanced's
  // default chunk x W at both sizes), so the comparison sees the layout, not its padding.
  const int64_t s1 = 256 * cp, s2 = 4 * s1;
  const auto runs = [&](int64_t len) {
    LayoutRequest req;
    req.cp = cp;
    req.seq_len = len;
    if (layout.packed()) req.doc_lens = {len};
    return max_runs_per_rank(layout.compute(req));
  };
  // Striped-like layouts own a number of chunks proportional to S (4x here); chunked ones a number
  // that does not depend on S, up to the balancing of data-dependent layouts (a chunk more or less).
  const int64_t a = runs(s1), b = runs(s2);
  if (b < 2 * a) return "";
  return detail::concat(axis, " state_passing: layout ", layout.name(), " gives a rank ", a, " separate chunks of a ",
                        s1, "-token row at cp ", cp, " and ", b, " at ", s2,
                        " tokens; state passing exchanges one state per chunk and needs ranks that own a fixed "
                        "number of contiguous chunks (contiguous, load_balanced, thd, sdpa_wrap, workload_balanced)");
}

}  // namespace cpbench
