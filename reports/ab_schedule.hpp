#pragma once
// The order `cpbench compare --ab` runs its rounds in (harness/cli/ab_command.cpp executes it; the A/B
// verdict, reports/paired_rounds.hpp, reads the pairs it forms). Per case, blocks of four rounds, each
// ABBA or BAAB (A the base build, B the new one), the order drawn per block and case from a generator
// seeded with `seed`; blocks go case after case, so every case's rounds spread over the whole session.
// In a block the first two rounds are pair 2j and the last two pair 2j+1, each the two adjacent rounds
// of a block half: ABBA gives (A, B) base first and (B, A) new first; the two middle rounds (BB or AA)
// are one build twice in adjacent slots, the session's A/A pair.
#include <cstdint>
#include <vector>

namespace cpbench {

struct AbRound {
  int64_t case_index = 0;  // into the cases the session runs
  int64_t block = 0;       // 0-based, per case
  int64_t pair = 0;        // the case's pair this round belongs to (2 block + 0 or 1)
  bool base_side = true;   // the base build runs it
  bool base_first = true;  // in its pair, the base round runs before the new one
};

// Every round of a session in the order they run: blocks = ceil(rounds / 2) per case, 4 rounds each.
[[nodiscard]] std::vector<AbRound> ab_schedule(int64_t cases, int64_t rounds, uint64_t seed);

}  // namespace cpbench
