#include "sharders/token_map.hpp"

#include <algorithm>

#include "sharders/core/check.hpp"

namespace cpbench {

namespace {

// Slice copies beat one index_select when the map has few long runs: a copy_ call costs about as much
// as copying a few dozen indexed rows.
bool few_runs(size_t runs, int64_t n) { return runs <= 4 || static_cast<int64_t>(runs) * 64 <= n; }

// Runs of equally spaced sources of src (src[j] = -1: fill), each written to consecutive outputs.
std::vector<TokenMap::Run> runs_of(const std::vector<int64_t>& src) {
  std::vector<TokenMap::Run> runs;
  for (size_t j = 0; j < src.size(); ++j) {
    const int64_t s = src[j];
    if (!runs.empty()) {
      TokenMap::Run& last = runs.back();
      if (s < 0 && last.src < 0) {
        ++last.len;
        continue;
      }
      if (s >= 0 && last.src >= 0) {
        if (last.len == 1 && s > last.src) last.step = s - last.src;
        if (s == last.src + last.len * last.step) {
          ++last.len;
          continue;
        }
      }
    }
    runs.push_back({s < 0 ? -1 : s, static_cast<int64_t>(j), 1, 1});
  }
  return runs;
}

// t's elements start, start + step, ... (n of them) on dim.
at::Tensor strided(const at::Tensor& t, int64_t dim, int64_t start, int64_t n, int64_t step) {
  return step == 1 ? t.narrow(dim, start, n) : t.slice(dim, start, start + (n - 1) * step + 1, step);
}

std::string map_key(int coords, int64_t P, const at::Device& device) {
  return detail::concat(coords, ":", P, ":", device.str());
}

std::vector<int64_t> with_len(const at::Tensor& t, int64_t dim, int64_t n) {
  std::vector<int64_t> shape = t.sizes().vec();
  shape[static_cast<size_t>(dim)] = n;
  return shape;
}

}  // namespace

at::Tensor as_index_tensor(const std::vector<int64_t>& v, const at::Device& device) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::kLong);
  std::copy(v.begin(), v.end(), t.data_ptr<int64_t>());
  return device.is_cpu() ? t : t.to(device);
}

TokenMap make_token_map(const std::vector<int64_t>& src, const at::Device& device) {
  TokenMap m;
  m.out_len = static_cast<int64_t>(src.size());
  m.runs = runs_of(src);
  m.use_runs = few_runs(m.runs.size(), m.out_len);
  if (!m.use_runs) {
    std::vector<int64_t> idx(src.size()), holes;
    for (size_t j = 0; j < src.size(); ++j) {
      idx[j] = std::max<int64_t>(src[j], 0);
      if (src[j] < 0) holes.push_back(static_cast<int64_t>(j));
    }
    m.index = as_index_tensor(idx, device);
    if (!holes.empty()) m.holes = as_index_tensor(holes, device);
  } else {
    for (const auto& r : m.runs)
      if (r.src < 0) m.holes = at::empty({0}, at::kLong);  // marks "has holes"; runs fill them
  }
  return m;
}

ScatterMap make_scatter_map(const std::vector<std::vector<int64_t>>& dst, int64_t out_len, const at::Device& device) {
  ScatterMap m;
  m.out_len = out_len;
  std::vector<uint8_t> written(static_cast<size_t>(m.out_len), 0);
  size_t total_runs = 0;
  for (const auto& d : dst) {
    for (int64_t x : d)
      if (x >= 0) written[static_cast<size_t>(x)] = 1;
    // Runs over (local j -> dst), consecutive locals to equally spaced outputs, skipping dropped locals.
    std::vector<TokenMap::Run> runs;
    for (size_t j = 0; j < d.size(); ++j) {
      if (d[j] < 0) continue;
      const auto jj = static_cast<int64_t>(j);
      if (!runs.empty() && runs.back().src + runs.back().len == jj) {
        TokenMap::Run& last = runs.back();
        if (last.len == 1 && d[j] > last.dst) last.step = d[j] - last.dst;
        if (d[j] == last.dst + last.len * last.step) {
          ++last.len;
          continue;
        }
      }
      runs.push_back({jj, d[j], 1, 1});
    }
    total_runs += runs.size();
    m.runs.push_back(std::move(runs));
  }
  std::vector<int64_t> holes;
  for (int64_t i = 0; i < m.out_len; ++i)
    if (!written[static_cast<size_t>(i)]) holes.push_back(i);
  for (size_t k = 0; k < holes.size(); ++k) {
    if (!m.hole_runs.empty() && m.hole_runs.back().dst + m.hole_runs.back().len == holes[k])
      ++m.hole_runs.back().len;
    else
      m.hole_runs.push_back({-1, holes[k], 1, 1});
  }
  if (!holes.empty()) m.holes = as_index_tensor(holes, device);
  m.use_runs = few_runs(total_runs, m.out_len);
  if (!m.use_runs) {
    for (const auto& d : dst) {
      std::vector<int64_t> kept, to;
      for (size_t j = 0; j < d.size(); ++j)
        if (d[j] >= 0) {
          kept.push_back(static_cast<int64_t>(j));
          to.push_back(d[j]);
        }
      m.kept.push_back(kept.size() == d.size() ? at::Tensor() : as_index_tensor(kept, device));
      m.dst.push_back(as_index_tensor(to, device));
    }
  }
  return m;
}

at::Tensor apply_token_map(const TokenMap& m, const at::Tensor& t, int64_t dim, const std::optional<at::Scalar>& fill) {
  CP_CHECK(!m.holes.defined() || fill.has_value(), "apply_token_map: the map has holes and no fill");
  if (!m.use_runs) {
    at::Tensor out = t.index_select(dim, m.index.device() == t.device() ? m.index : m.index.to(t.device()));
    if (m.holes.defined()) out.index_fill_(dim, m.holes, *fill);
    return out;
  }
  at::Tensor out = at::empty(with_len(t, dim, m.out_len), t.options());
  for (const auto& r : m.runs) {
    at::Tensor dst = out.narrow(dim, r.dst, r.len);
    if (r.src < 0)
      dst.fill_(*fill);
    else
      dst.copy_(strided(t, dim, r.src, r.len, r.step));
  }
  return out;
}

at::Tensor apply_scatter_map(const ScatterMap& m, const std::vector<at::Tensor>& parts, int64_t dim,
                             const std::optional<at::Scalar>& fill) {
  CP_CHECK(!m.holes.defined() || fill.has_value(), "apply_scatter_map: the map has holes and no fill");
  at::Tensor out = at::empty(with_len(parts[0], dim, m.out_len), parts[0].options());
  for (size_t r = 0; r < parts.size(); ++r) {
    if (m.use_runs) {
      for (const auto& run : m.runs[r])
        strided(out, dim, run.dst, run.len, run.step).copy_(parts[r].narrow(dim, run.src, run.len));
    } else {
      const at::Tensor src = m.kept[r].defined() ? parts[r].index_select(dim, m.kept[r]) : parts[r];
      out.index_copy_(dim, m.dst[r], src);
    }
  }
  for (const auto& h : m.hole_runs) out.narrow(dim, h.dst, h.len).fill_(*fill);
  return out;
}

const TokenMap& TokenMapCache::shard(int coords, int64_t length, const at::Device& device,
                                     const std::function<TokenMap()>& build) {
  const std::string key = map_key(coords, length, device);
  if (auto it = shard_.find(key); it != shard_.end()) return it->second;
  return shard_.emplace(key, build()).first->second;
}

const ScatterMap& TokenMapCache::gather(int coords, int64_t length, const at::Device& device,
                                        const std::function<ScatterMap()>& build) {
  const std::string key = map_key(coords, length, device);
  if (auto it = gather_.find(key); it != gather_.end()) return it->second;
  return gather_.emplace(key, build()).first->second;
}

void TokenMapCache::clear() {
  shard_.clear();
  gather_.clear();
}

}  // namespace cpbench
