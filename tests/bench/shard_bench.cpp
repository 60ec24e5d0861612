// Micro-benchmarks (Google Benchmark). Speeds are reported as ratios measured in the same run:
//   BM_Shard/<layout>   shard_token_tensor of a [B, S, H] tensor; counter x_copy = time / time of a
//                       plain copy of the same bytes (timed alternately in the same iterations);
//                       unpacked layouts also x_rows = time / a hand-written loop that memcpy's the
//                       rows this rank owns (the layout's map, row by row): the floor the memory
//                       system sets for that access pattern (striped reads 1 KiB rows 8 KiB apart)
//   BM_Gather/<layout>  restore_gathered (reorder + trim to the caller's coordinates) of all ranks'
//                       shards; same counter against a copy of the gathered bytes
// Sizes: B = 2, S = 16384, H = 256 float32, W = 8, one thread (the issue #11 targets: x_copy <= 1.3).
// thd: documents of 5000, 7000, 4384 tokens per row (slots re-padded, tokens move); thd_aligned: slots
// already multiples of 2W (the stream is the flattened rows).
//   BM_Layout/<layout>  Layout::compute for large W and S (pure index maths)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "sharders/registry.hpp"
#include "sharders/sharder.hpp"

using namespace cpbench;

namespace {
constexpr int64_t kB = 2, kS = 16384, kH = 256, kW = 8, kRank = 3;

const char* kLayouts[] = {"contiguous", "load_balanced", "striped", "thd", "thd_aligned", "sdpa_wrap"};

Sharder sharded(const std::string& name, Batch* out_batch = nullptr) {
  const bool thd = name.rfind("thd", 0) == 0;
  Sharder s(make_layout(thd ? "thd" : name), SharderOptions{kW, kRank, 0, MaskSpec{}, 0});
  Batch b;
  b.input_ids = at::randint(1, 100, {kB, kS}, at::kLong);
  b.labels = *b.input_ids;
  if (name == "thd") {
    b.seq_lens = at::tensor({int64_t{5000}, int64_t{7000}, int64_t{4384}}, at::kLong).view({1, 3}).repeat({kB, 1});
  } else if (name == "thd_aligned") {
    b.seq_lens = at::tensor({int64_t{5000}, int64_t{6990}, int64_t{4384}}, at::kLong).view({1, 3}).repeat({kB, 1});
    b.seq_lens_padded =
        at::tensor({int64_t{5008}, int64_t{6992}, int64_t{4384}}, at::kLong).view({1, 3}).repeat({kB, 1});
  }
  Batch local = s.shard(b);
  if (out_batch) *out_batch = local;
  return s;
}

// dst[b, j, :] = x[b, rows[j], :] for float32 [B, S, H] x, one memcpy per row.
void copy_rows(const at::Tensor& x, const std::vector<int64_t>& rows, at::Tensor& dst) {
  const int64_t S = x.size(1), H = x.size(2), n = static_cast<int64_t>(rows.size());
  const float* src = x.const_data_ptr<float>();
  float* out = dst.mutable_data_ptr<float>();
  for (int64_t b = 0; b < x.size(0); ++b)
    for (int64_t j = 0; j < n; ++j)
      std::memcpy(out + (b * n + j) * H, src + (b * S + rows[static_cast<size_t>(j)]) * H,
                  static_cast<size_t>(H) * sizeof(float));
}

template <typename F>
double time_once(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BM_Shard(benchmark::State& state, const std::string& name) {
  at::set_num_threads(1);
  Sharder s = sharded(name);
  at::Tensor x = at::randn({kB, kS, kH});
  // This rank's positions in local order (unpacked layouts: the rows of each batch row it keeps).
  std::vector<int64_t> rows;
  if (name.rfind("thd", 0) != 0) rows = s.shard_layout().global.ranks[static_cast<size_t>(kRank)];
  double shard_s = 0, copy_s = 0, rows_s = 0;
  for (auto _ : state) {
    at::Tensor y;
    const double t = time_once([&] { y = s.shard_token_tensor(x, 1, 0.0); });
    benchmark::DoNotOptimize(y.data_ptr());
    // The same bytes a rank keeps, copied plainly.
    at::Tensor dst = at::empty_like(y);
    copy_s += time_once([&] { dst.copy_(x.view(-1).narrow(0, 0, y.numel()).view(y.sizes())); });
    if (!rows.empty()) {
      at::Tensor floor_dst = at::empty_like(y);
      rows_s += time_once([&] { copy_rows(x, rows, floor_dst); });
    }
    shard_s += t;
    state.SetIterationTime(t);
  }
  state.counters["x_copy"] = shard_s / copy_s;
  if (!rows.empty()) state.counters["x_rows"] = shard_s / rows_s;
  state.SetBytesProcessed(state.iterations() * kB * (kS / kW) * kH * 4);
}

void BM_Gather(benchmark::State& state, const std::string& name) {
  at::set_num_threads(1);
  Sharder s = sharded(name);
  const int64_t P = s.shard_layout().padded_seq_len;
  // thd gathers the flat stream [1, P, H] back to the rows [B, S, H].
  at::Tensor rank_order = at::randn({name.rfind("thd", 0) == 0 ? 1 : kB, P, kH});
  double gather_s = 0, copy_s = 0;
  for (auto _ : state) {
    at::Tensor y;
    const double t = time_once([&] { y = s.restore_gathered(rank_order, 1, /*trim=*/true, 0.0); });
    benchmark::DoNotOptimize(y.data_ptr());
    at::Tensor dst = at::empty_like(rank_order);
    copy_s += time_once([&] { dst.copy_(rank_order); });
    gather_s += t;
    state.SetIterationTime(t);
  }
  state.counters["x_copy"] = gather_s / copy_s;
}

void BM_Layout(benchmark::State& state, const std::string& name_in) {
  const std::string name = name_in == "thd_aligned" ? "thd" : name_in;
  const int64_t W = state.range(0), S = state.range(1);
  auto layout = make_layout(name);
  LayoutRequest req{W, S, {}, MaskSpec{}, 0, {}};
  if (name == "thd") {
    for (int64_t left = S; left > 0; left -= 4096) req.doc_lens.push_back(std::min<int64_t>(4096, left));
  }
  for (auto _ : state) {
    GlobalLayout g = layout->compute(req);
    benchmark::DoNotOptimize(g.ranks.data());
  }
  state.SetItemsProcessed(state.iterations() * S);
}

const bool registered = [] {
  for (const char* n : kLayouts) {
    benchmark::RegisterBenchmark((std::string("BM_Shard/") + n).c_str(), BM_Shard, std::string(n))
        ->UseManualTime()->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark((std::string("BM_Gather/") + n).c_str(), BM_Gather, std::string(n))
        ->UseManualTime()->Unit(benchmark::kMicrosecond);
    if (std::string(n) == "thd_aligned") continue;
    benchmark::RegisterBenchmark((std::string("BM_Layout/") + n).c_str(), BM_Layout, std::string(n))
        ->Args({1024, 1 << 20})->Args({8, 131072})->Unit(benchmark::kMillisecond);
  }
  return true;
}();
}  // namespace


