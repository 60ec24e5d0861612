#include "reports/ab_schedule.hpp"

#include <random>
#include <stdexcept>

namespace cpbench {

std::vector<AbRound> ab_schedule(int64_t cases, int64_t rounds, uint64_t seed) {
  if (cases < 0 || rounds < 2) throw std::invalid_argument("ab_schedule: needs cases >= 0 and rounds >= 2");
  const int64_t blocks = (rounds + 1) / 2;
  std::mt19937_64 gen(seed);
  std::bernoulli_distribution abba(0.5);
  std::vector<AbRound> out;
  out.reserve(static_cast<size_t>(cases * blocks * 4));
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = 0; i < cases; ++i) {
      // ABBA or BAAB, drawn: a load that changes with the session's rhythm cannot favour one side, and
      // the middle two rounds are the same build (the A/A pair the verdict's floor is measured from).
      const bool base_first = abba(gen);
      const bool side[4] = {base_first, !base_first, !base_first, base_first};
      for (int k = 0; k < 4; ++k) {
        AbRound r;
        r.case_index = i;
        r.block = b;
        r.pair = 2 * b + k / 2;
        r.base_side = side[k];
        r.base_first = side[2 * (k / 2)];  // the side of the pair's first round
        out.push_back(r);
      }
    }
  return out;
}

}  // namespace cpbench
