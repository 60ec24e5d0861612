// KDA's delta-rule part (kernels/mixers/kda/kda.hpp: kda_scan_inputs, then the chunked scan) against an
// independent KDA written here in plain loops from flash-linear-attention's definition, not from cpbench's:
// KimiDeltaAttention.forward (fla/layers/kda.py) takes q, k, v from the short convolution with SiLU,
// g = fused_kda_gate(f, A_log, dk, g_bias=dt_bias) = -exp(A_log[h]) softplus(f + dt_bias), beta = sigmoid(b),
// and chunk_kda(..., use_qk_l2norm_in_kernel=True) with the default scale dk^-1/2; its reference,
// naive_recurrent_kda (fla/ops/kda/naive.py), runs per token S <- S * exp(g_t) (per key channel),
// S <- S + (beta_t k_t) (v_t - k_t^T S)^T, o_t = (scale q_t)^T S; l2norm is x / sqrt(sum x^2 + 1e-6).
// The CP check compares the CP run with cpbench's own single-rank KDA, which shares kda_scan_inputs: only
// a second implementation sees a mistake there (a query scaled by dv^-1/2 instead of dk^-1/2, say), so dk
// and dv differ here.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/mixers/gdn/gdn_scan.hpp"
#include "kernels/mixers/kda/kda.hpp"

namespace cpbench {
namespace {

double silu(double x) { return x / (1 + std::exp(-x)); }
double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

TEST(KdaAgainstFla, NaiveRecurrenceOfTheLayersInputsMatchesTheScan) {
  const int64_t R = 2, L = 37, K = 4, h = 2, dk = 8, dv = 4, C = h * (2 * dk + dv);
  at::manual_seed(52);
  const auto f64 = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor taps = at::randn({R, L, K, C}, f64), bf = at::randn({R, L, h + h * dk}, f64);
  const at::Tensor conv_w = at::randn({C, K}, f64) * 0.6, dt_bias = at::randn({h * dk}, f64) * 0.5;
  const at::Tensor A_log = at::randn({h}, f64) * 0.5 - 1.0;
  const at::Tensor valid = at::ones({R, L}, at::kBool);

  const GdnScanInputs in = kda_scan_inputs(taps, bf, valid, conv_w, dt_bias, A_log, h, dk, dv, at::kDouble);
  const at::Tensor group = at::zeros({R, L}, at::kLong);
  const at::Tensor got = gdn_chunk_scan(in.q, in.k, in.v, in.g, in.beta, group, 16).o;  // [R, L, h, dv]
  ASSERT_EQ(got.sizes(), (at::IntArrayRef{R, L, h, dv}));

  auto T = taps.accessor<double, 4>();
  auto B = bf.accessor<double, 3>();
  auto Wc = conv_w.accessor<double, 2>();
  auto Db = dt_bias.accessor<double, 1>();
  auto Al = A_log.accessor<double, 1>();
  auto O = got.accessor<double, 4>();
  const double scale = 1 / std::sqrt(static_cast<double>(dk));
  double worst = 0, largest = 0;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t hh = 0; hh < h; ++hh) {
      std::vector<double> S(static_cast<size_t>(dk * dv), 0.0);  // S[c][j]: key channel c, value channel j
      for (int64_t t = 0; t < L; ++t) {
        // The short convolution with SiLU: channel ch of [q | k | v], taps of this token and the K-1 before.
        const auto conv = [&](int64_t ch) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k) s += T[r][t][k][ch] * Wc[ch][k];
          return silu(s);
        };
        std::vector<double> q(static_cast<size_t>(dk)), k(static_cast<size_t>(dk)), v(static_cast<size_t>(dv));
        double qn = 0, kn = 0;
        for (int64_t c = 0; c < dk; ++c) {
          q[static_cast<size_t>(c)] = conv(hh * dk + c);
          k[static_cast<size_t>(c)] = conv(h * dk + hh * dk + c);
          qn += q[static_cast<size_t>(c)] * q[static_cast<size_t>(c)];
          kn += k[static_cast<size_t>(c)] * k[static_cast<size_t>(c)];
        }
        for (int64_t j = 0; j < dv; ++j) v[static_cast<size_t>(j)] = conv(2 * h * dk + hh * dv + j);
        for (int64_t c = 0; c < dk; ++c) {
          q[static_cast<size_t>(c)] *= scale / std::sqrt(qn + 1e-6);
          k[static_cast<size_t>(c)] /= std::sqrt(kn + 1e-6);
        }
        const double beta = sigmoid(B[r][t][hh]);
        // Decay per key channel, then the delta rule's correction toward v.
        for (int64_t c = 0; c < dk; ++c) {
          const double g = -std::exp(Al[hh]) * softplus(B[r][t][h + hh * dk + c] + Db[hh * dk + c]);
          for (int64_t j = 0; j < dv; ++j) S[static_cast<size_t>(c * dv + j)] *= std::exp(g);
        }
        for (int64_t j = 0; j < dv; ++j) {
          double kS = 0;
          for (int64_t c = 0; c < dk; ++c) kS += k[static_cast<size_t>(c)] * S[static_cast<size_t>(c * dv + j)];
          const double u = v[static_cast<size_t>(j)] - kS;
          for (int64_t c = 0; c < dk; ++c) S[static_cast<size_t>(c * dv + j)] += beta * k[static_cast<size_t>(c)] * u;
        }
        for (int64_t j = 0; j < dv; ++j) {
          double o = 0;
          for (int64_t c = 0; c < dk; ++c) o += q[static_cast<size_t>(c)] * S[static_cast<size_t>(c * dv + j)];
          worst = std::max(worst, std::abs(O[r][t][hh][j] - o));
          largest = std::max(largest, std::abs(o));
          EXPECT_NEAR(O[r][t][hh][j], o, 1e-10 * std::max(1.0, std::abs(o)))
              << "row " << r << " token " << t << " head " << hh << " value channel " << j;
        }
      }
    }
  EXPECT_GT(largest, 0.05) << "the outputs are not trivially small";
  RecordProperty("worst_abs_difference", std::to_string(worst));
}

}  // namespace
}  // namespace cpbench
