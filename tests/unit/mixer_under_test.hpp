#pragma once
// A linear mixer's layer as the CP layer tests drive it (ssm_cp_test.cpp, gdn_cp_test.cpp, kda_cp_test.cpp):
// its recurrent part's forward, its parameters as autograd leaves and its widths, so that running it on W
// ranks against one rank (linear_cp_test_util.hpp) is written once for every mixer.
#include <memory>
#include <utility>
#include <vector>

#include "kernels/mixers/linear/linear_parts.hpp"
#include "tests/unit/linear_cp_test_util.hpp"

namespace cpbench::linear_test {

template <class Config, class Params, class Context>
struct MixerUnderTest {
  // proj [R, S_local, width_in] -> [R, S_local, width_out] (collective over the context's ranks).
  at::Tensor (*forward)(const at::Tensor& proj, const Params&, const Config&, const Context&);
  std::vector<at::Tensor> (*leaves)(const Params&);             // the leaves whose gradients are compared
  Params (*as_leaves)(const Params& p64, at::ScalarType dtype);  // fresh leaves in `dtype`
  int64_t (*width_in)(const Config&);
  int64_t (*width_out)(const Config&);
};

template <class Config>
using OptionsOf = LinearCpOptions<typename LinearPartsOf<Config>::Strategy>;

// The layer over `st` on W threads, loss = sum(y * wy); the state-dropped control, when asked for, on the
// last rank only.
template <class Config, class Params, class Context>
LayerRun run_cp_mixer(const MixerUnderTest<Config, Params, Context>& m, const Laid& st, const Config& c,
                      const Params& p64, const at::Tensor& proj, const at::Tensor& wy, const MaskSpec& mask,
                      at::ScalarType dtype, const OptionsOf<Config>& options) {
  return run_cp_layer(
      st, m.width_out(c), m.leaves(p64), proj, wy, dtype,
      [&](int64_t r, const comm::Communicator& cm, const TokenMeta& all_meta, int64_t* sent) -> RankForward {
        OptionsOf<Config> o = options;
        o.drop_incoming_state = options.drop_incoming_state && r == st.g.cp - 1;
        auto ctx = std::make_shared<Context>(cp_linear_context(cm, st.g, all_meta, mask, c, dtype, at::kCPU, "cp:test", o));
        ctx->bytes_sent = sent;
        return [&, ctx](const at::Tensor& x) {
          const Params params = m.as_leaves(p64, dtype);
          return RankRun{m.forward(x, params, c, *ctx), m.leaves(params), ctx->bytes_per_layer()};
        };
      });
}

// The same layer on one rank over the whole batch (the reference), loss = sum(y * wy).
template <class Config, class Params, class Context>
LayerRun run_single_mixer(const MixerUnderTest<Config, Params, Context>& m, const TokenMeta& meta, const Config& c,
                          const Params& p64, const at::Tensor& proj, const at::Tensor& wy, const MaskSpec& mask,
                          at::ScalarType dtype) {
  const Context ctx = single_rank_linear_context(meta, mask, c, dtype, at::kCPU);
  return run_single_layer(proj, wy, dtype, [&](const at::Tensor& x) {
    const Params params = m.as_leaves(p64, dtype);
    return RankRun{m.forward(x, params, c, ctx), m.leaves(params), 0};
  });
}

// One case (check_case's stream, inputs and checks) with parameters `p`: W ranks against one.
template <class Config, class Params, class Context>
Compared check_mixer(const MixerUnderTest<Config, Params, Context>& m,
                     const LayerCase<typename LinearPartsOf<Config>::Strategy>& k, const Config& c, const Params& p,
                     bool drop_state) {
  OptionsOf<Config> opt;
  opt.strategy = k.strategy;
  opt.drop_incoming_state = drop_state;
  const auto run = [&](const Laid& st, const at::Tensor& proj, const at::Tensor& wy, const MaskSpec& mask) {
    return std::pair{run_cp_mixer(m, st, c, p, proj, wy, mask, k.dtype, opt),
                     run_single_mixer(m, st.meta, c, p, proj, wy, mask, k.dtype)};
  };
  return check_case(k.layout, k.W, k.mask, m.width_in(c), m.width_out(c), run);
}

}  // namespace cpbench::linear_test
