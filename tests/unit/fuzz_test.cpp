// Fuzzing with a fixed seed (reproducible; CPBENCH_FUZZ_SEED picks another):
//  - the sharder verbs (shard, shard_token_tensor, gather_token_tensor, local_token_global_indices)
//    with random W, rank, lengths, seq_dim, dtypes, fills and THD document lists, valid and invalid:
//    never a crash, invalid input raises cpbench::Error (nothing else escapes), valid input round-trips
//    exactly (gather(shard(t)) with trim == t).
//  - scenario files: random mutations of the shipped scenarios through parse_scenario and admission:
//    every outcome is a ScenarioSpec or a UsageError with one line.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "../scenario_mutator.hpp"
#include "harness/runner/admission.hpp"
#include "harness/runner/scenario.hpp"
#include "sharders/core/check.hpp"
#include "sharders/registry.hpp"
#include "sharders/sharder.hpp"
#include "tests/test_paths.hpp"  // CPBENCH_EXE, CPBENCH_SOURCE_DIR, ...

using namespace cpbench;

namespace {

uint64_t fuzz_seed() {
  const char* s = std::getenv("CPBENCH_FUZZ_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 20261201;
}

// Outcome counts and the first few unexpected exceptions, by verb.
struct Tally {
  int64_t calls = 0, ok = 0, errors = 0, round_trips = 0;
  std::vector<std::string> leaks;  // "verb: type: message" for anything but cpbench::Error
  void leak(const std::string& verb, const std::string& what) {
    if (leaks.size() < 20) leaks.push_back(verb + ": " + what.substr(0, 300));
  }
};

// Runs `f`; true when it returned, false when it raised cpbench::Error; any other exception is a leak.
template <typename F>
bool call(Tally& t, const std::string& verb, F&& f) {
  ++t.calls;
  try {
    f();
    ++t.ok;
    return true;
  } catch (const Error&) {
    ++t.errors;
  } catch (const c10::Error& e) {
    t.leak(verb, std::string("c10::Error: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    t.leak(verb, std::string("std::exception: ") + e.what());
  } catch (...) {
    t.leak(verb, "unknown exception");
  }
  return false;
}

struct Rng {
  std::mt19937_64 g;
  int64_t in(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(g() % static_cast<uint64_t>(hi - lo + 1)); }
  bool chance(int percent) { return in(0, 99) < percent; }
};

// Random documents for B rows of S tokens: mostly valid (positive, summing to <= S), sometimes not.
std::optional<at::Tensor> random_seq_lens(Rng& r, int64_t B, int64_t S, bool* valid) {
  *valid = true;
  const int64_t D = r.in(1, 4);
  at::Tensor lens = at::full({B, D}, kSeqLensSentinel, at::kLong);
  for (int64_t b = 0; b < B; ++b) {
    int64_t left = S;
    for (int64_t d = 0; d < D && left > 0; ++d) {
      const int64_t len = r.in(1, left);
      lens[b][d] = len;
      left -= len;
      if (r.chance(30)) break;
    }
  }
  switch (r.in(0, 9)) {
    case 0:  // a document longer than its row
      lens[r.in(0, B - 1)][0] = S + r.in(1, 5);
      *valid = false;
      break;
    case 1:  // zero or negative lengths
      lens[r.in(0, B - 1)][r.in(0, D - 1)] = r.in(-3, 0);
      *valid = false;
      break;
    case 2:  // wrong number of rows
      lens = at::full({B + 1, D}, 1, at::kLong);
      *valid = false;
      break;
    case 3:  // not a [B, D] int64 tensor
      lens = r.chance(50) ? at::ones({B}, at::kLong) : at::ones({B, D}, at::kFloat);
      *valid = false;
      break;
    default:
      break;
  }
  return lens;
}

at::ScalarType random_dtype(Rng& r) {
  static const at::ScalarType kinds[] = {at::kFloat, at::kDouble, at::kLong, at::kInt, at::kBool, at::kBFloat16, at::kHalf};
  return kinds[r.in(0, 6)];
}

// Index-addressed values (exact in every dtype above: small integers).
at::Tensor token_tensor(const std::vector<int64_t>& shape, at::ScalarType dt) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  at::Tensor t = at::arange(n, at::kLong).remainder(97).add(1).view(shape);
  return dt == at::kBool ? t.remainder(2).to(at::kBool) : t.to(dt);
}

}  // namespace

TEST(Fuzz, SharderVerbsNeverCrashAndRoundTripExactly) {
  const auto t0 = std::chrono::steady_clock::now();
  Rng r{std::mt19937_64(fuzz_seed())};
  const std::vector<std::string> layouts = known_layouts();
  Tally t;
  int64_t iteration = 0;
  while (t.calls < 10000) {
    ++iteration;
    const std::string name = layouts[static_cast<size_t>(r.in(0, static_cast<int64_t>(layouts.size()) - 1))];
    const int64_t W = r.in(1, 9), B = r.in(1, 3), S = r.in(1, 40);
    const bool thd = name == "thd";
    std::shared_ptr<const Layout> layout;
    ASSERT_TRUE(call(t, "make_layout", [&] { layout = make_layout(name); })) << name;
    std::vector<Sharder> ranks;
    for (int64_t k = 0; k < W; ++k) ranks.emplace_back(layout, SharderOptions{W, k, -7, MaskSpec{}, 0});
    SCOPED_TRACE(name + " W=" + std::to_string(W) + " B=" + std::to_string(B) + " S=" + std::to_string(S) +
                 " iteration " + std::to_string(iteration));

    // Asking for indices before a shard, with random (possibly bad) arguments.
    {
      const int64_t P = r.chance(80) ? S + r.in(0, 2 * W) : r.in(-5, 0);
      const int64_t rank = r.chance(80) ? r.in(0, W - 1) : (r.chance(50) ? W + r.in(0, 3) : -r.in(1, 3));
      call(t, "local_token_global_indices", [&] { (void)ranks[0].local_token_global_indices(P, rank); });
    }

    // shard(batch) on every rank: one random batch, sometimes broken.
    Batch batch;
    batch.input_ids = token_tensor({B, S}, at::kLong);
    batch.labels = token_tensor({B, S}, at::kLong);
    bool docs_valid = true;
    if (thd || r.chance(20)) batch.seq_lens = random_seq_lens(r, B, S, &docs_valid);
    // Documents on an unpacked layout: only "no crash, no foreign exception" is checked.
    bool batch_valid = docs_valid && (thd || !batch.seq_lens);
    switch (r.in(0, 11)) {
      case 0:
        batch.labels.reset();
        batch_valid = false;
        break;
      case 1:
        batch.labels = token_tensor({B, S + 1}, at::kLong);
        batch_valid = false;
        break;
      case 2:
        batch.inputs_embeds = token_tensor({B, S, 2}, at::kFloat);  // both primaries
        batch_valid = false;
        break;
      case 3:
        batch.position_ids = token_tensor({B, S}, at::kLong);
        break;
      case 4:
        batch.loss_mask = token_tensor({B, S}, random_dtype(r));
        break;
      case 5:
        batch.extras["x"] = ExtraBuffer{token_tensor({B, S, 3}, random_dtype(r)), r.in(-1, 3), std::nullopt};
        batch_valid = false;  // the seq_dim may or may not be right: only "no crash" is checked
        break;
      default:
        break;
    }
    std::vector<Batch> locals;
    bool all_sharded = true;
    for (int64_t k = 0; k < W; ++k) {
      Batch local;
      if (call(t, "shard", [&] { local = ranks[static_cast<size_t>(k)].shard(batch); })) locals.push_back(local);
      else all_sharded = false;
    }
    if (batch_valid && !all_sharded)
      ADD_FAILURE() << "a valid batch was refused";  // (documents valid, keys well-formed)
    if (!all_sharded) continue;

    // input_ids round trip through the gather (trim: the caller's coordinates; dropped thd slots: fill).
    {
      std::vector<at::Tensor> parts;
      for (const auto& l : locals) parts.push_back(*l.input_ids);
      at::Tensor back;
      if (call(t, "gather_token_tensor", [&] { back = ranks[0].gather_token_tensor(parts, 1, true, -7); })) {
        at::Tensor expect = *batch.input_ids;
        const auto& sl = ranks[0].shard_layout();
        if (sl.input_token_stream_positions) expect = at::where(sl.input_token_stream_positions->lt(0), at::full_like(expect, -7), expect);
        if (!back.equal(expect)) ADD_FAILURE() << "input_ids do not round-trip";
        else ++t.round_trips;
      } else {
        ADD_FAILURE() << "gathering the shards of a valid batch failed";
      }
    }

    // Any token-aligned tensor: random dtype, extra dims, seq_dim, length (right, padded or wrong), fill.
    for (int rep = 0; rep < 2; ++rep) {
      const at::ScalarType dt = random_dtype(r);
      const int64_t extra = r.in(0, 2);
      std::vector<int64_t> shape = {B, S};
      for (int64_t i = 0; i < extra; ++i) shape.push_back(r.in(1, 3));
      int64_t seq_dim = 1;
      if (!thd && r.chance(30)) {  // sequence first
        std::swap(shape[0], shape[1]);
        seq_dim = 0;
      }
      bool valid = true;
      const int64_t P = ranks[0].shard_layout().padded_seq_len;
      switch (r.in(0, 6)) {
        case 0:
          shape[static_cast<size_t>(seq_dim)] = S + r.in(1, 3) == P ? S + 4 : S + r.in(1, 3);  // foreign length
          valid = false;
          break;
        case 1:
          seq_dim = r.chance(50) ? static_cast<int64_t>(shape.size()) + r.in(0, 2) : -r.in(1, 4);  // bad dim
          valid = false;
          break;
        default:
          break;
      }
      const at::Tensor x = token_tensor(shape, dt);
      const std::optional<at::Scalar> fill =
          r.chance(85) ? std::optional<at::Scalar>(dt == at::kBool ? at::Scalar(true) : at::Scalar(0)) : std::nullopt;
      std::vector<at::Tensor> parts;
      bool sharded = true;
      for (int64_t k = 0; k < W && sharded; ++k) {
        at::Tensor p;
        sharded = call(t, "shard_token_tensor", [&] { p = ranks[static_cast<size_t>(k)].shard_token_tensor(x, seq_dim, fill); });
        if (sharded) parts.push_back(p);
      }
      if (!sharded) continue;
      if (!valid) {
        // Accepted although the length is foreign or the dim is out of range: only fine when the
        // "foreign" length happened to be the padded one.
        if (seq_dim < 0 || seq_dim >= x.dim() || x.size(seq_dim) != P) ADD_FAILURE() << "bad input accepted: shape "
            << shape_str(x.sizes()) << " seq_dim " << seq_dim << " P " << P;
        continue;
      }
      at::Tensor back;
      if (!call(t, "gather_token_tensor", [&] { back = ranks[static_cast<size_t>(r.in(0, W - 1))].gather_token_tensor(parts, seq_dim, true, fill); }))
        continue;
      at::Tensor expect = x;
      const auto& sl = ranks[0].shard_layout();
      if (sl.input_token_stream_positions && fill) {
        at::Tensor dropped = sl.input_token_stream_positions->lt(0);
        for (int64_t i = 2; i < x.dim(); ++i) dropped = dropped.unsqueeze(-1);
        expect = at::where(dropped, at::full_like(x, *fill), x);
      }
      if (!back.sizes().equals(expect.sizes()) || !back.equal(expect))
        ADD_FAILURE() << "round trip differs for shape " << shape_str(x.sizes()) << " seq_dim " << seq_dim << " dtype "
                      << dt << ": got " << shape_str(back.sizes());
      else
        ++t.round_trips;
    }

    // Indices after the shard, for the padded length, with a random rank.
    const int64_t P = ranks[0].shard_layout().padded_seq_len;
    at::Tensor idx;
    const int64_t k = r.in(0, W - 1);
    if (call(t, "local_token_global_indices", [&] { idx = ranks[0].local_token_global_indices(P, k); })) {
      if (idx.numel() * W != P) ADD_FAILURE() << "rank " << k << " owns " << idx.numel() << " of P=" << P;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[fuzz] sharder verbs: " << t.calls << " calls in " << iteration << " batches (" << seconds << " s), " << t.ok
            << " returned, " << t.errors << " raised cpbench::Error, " << t.round_trips << " exact round trips, "
            << t.leaks.size() << " other exceptions\n";
  for (const auto& l : t.leaks) ADD_FAILURE() << "not a cpbench::Error: " << l;
  EXPECT_GT(t.round_trips, 1000);
  EXPECT_GT(t.errors, 200) << "the fuzz should reach the error paths";
}

TEST(Fuzz, MutatedScenariosParseOrFailWithOneLine) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> bases;
  for (const char* name : {"correctness", "quickstart", "variants", "perf_ci", "packed_documents", "gpu_throughput"}) {
    std::ifstream in(std::string(CPBENCH_SOURCE_DIR) + "/scenarios/" + name + ".yaml");
    std::stringstream ss;
    ss << in.rdbuf();
    bases.push_back(ss.str());
  }
  HostLimits limits;
  limits.available_bytes = 8.0 * (1 << 30);
  limits.total_bytes = 16.0 * (1 << 30);
  limits.max_local_ranks = 8;
  limits.cap_origin = "test";
  limits.runtime_bytes = kRankRuntimeFloorBytes;
  int64_t parsed = 0, refused = 0, admitted = 0;
  std::vector<std::string> problems;
  const uint64_t seed = fuzz_seed();
  for (int i = 0; i < 2000; ++i) {
    const std::string text = test::mutate_scenario(bases[static_cast<size_t>(i) % bases.size()], seed + static_cast<uint64_t>(i));
    auto problem = [&](const std::string& what) {
      if (problems.size() < 10) problems.push_back("mutation " + std::to_string(i) + ": " + what + "\n--- scenario ---\n" + text);
    };
    try {
      ScenarioSpec s = parse_scenario(text, "fuzz.yaml");
      ++parsed;
      admit(s, s.cases, limits);
      ++admitted;
    } catch (const UsageError& e) {
      ++refused;
      const std::string msg = e.what();
      if (msg.empty() || msg.find('\n') != std::string::npos) problem("UsageError is not one line: " + msg);
    } catch (const std::exception& e) {
      problem(std::string("not a UsageError: ") + typeid(e).name() + ": " + e.what());
    } catch (...) {
      problem("unknown exception");
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[fuzz] scenarios: 2000 mutations in " << seconds << " s: " << parsed << " parsed, " << admitted
            << " admitted, " << refused << " refused with a UsageError\n";
  for (const auto& p : problems) ADD_FAILURE() << p;
  EXPECT_GT(refused, 200);
  EXPECT_GT(admitted, 200);
}
