#include "kernels/mixers/gdn/delta_rule_fused.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <type_traits>
#include <utility>
#include <vector>

#include "sharders/core/check.hpp"

// at::parallel_for's OpenMP backend is a pragma compiled here: without -fopenmp every range would run on
// the calling thread (CMakeLists.txt, CPBENCH_OPENMP_SOURCES).
#if AT_PARALLEL_OPENMP && !defined(_OPENMP)
#error "this file must be compiled with -fopenmp (CMakeLists.txt: CPBENCH_OPENMP_SOURCES)"
#endif

namespace cpbench {

namespace {

// The elementwise loops, compiled for AVX-512 / AVX2 beside the baseline and picked at load time
// (GCC / Clang function multiversioning on x86-64): the build targets the baseline ISA, and these
// loops are most of the kernel's time outside the matmuls.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CPBENCH_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CPBENCH_CLONES
#endif

// (I + A)^-1 of a unit lower triangular I + A (A strictly lower, rows of stride lda), into Ti (stride ldt).
template <typename T>
inline __attribute__((always_inline)) void invert_unit_lower_body(const T* A, int64_t lda, T* Ti, int64_t ldt,
                                                                  int64_t n) {
  // Row t = e_t - sum_{s < t} A[t, s] row s, 16 columns at a time in a register block: rows hold zeros
  // right of their diagonal, so columns [jb, jb + 16) take rows s >= jb only. ldt: a multiple of 16.
  for (int64_t t = 0; t < n; ++t) {
    T* __restrict row = Ti + t * ldt;
    const T* At = A + t * lda;
    int64_t jb = 0;
    for (; jb < t; jb += 16) {
      T acc[16] = {};
      for (int64_t s = jb; s < t; ++s) {
        const T as = At[s];
        const T* __restrict rs = Ti + s * ldt + jb;
        for (int64_t j = 0; j < 16; ++j) acc[j] -= as * rs[j];
      }
      for (int64_t j = 0; j < 16; ++j) row[jb + j] = acc[j];
    }
    std::fill(row + jb, row + ldt, T(0));
    row[t] = 1;
  }
}
// xq = q E, xk = k E, ks = k Ei over `count` elements.
template <typename T>
inline __attribute__((always_inline)) void decay_factors_body(const T* __restrict q, const T* __restrict k,
                                                              const T* __restrict E, const T* __restrict Ei,
                                                              T* __restrict xq, T* __restrict xk, T* __restrict ks,
                                                              int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    xq[i] = q[i] * E[i];
    xk[i] = k[i] * E[i];
    ks[i] = k[i] * Ei[i];
  }
}
// e = G - G0 (rows of d) and, n rows further, G0 - G.
template <typename T>
inline __attribute__((always_inline)) void relative_decays_body(const T* __restrict G, const T* __restrict G0,
                                                                T* __restrict e, int64_t n, int64_t d) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c) {
      const T x = G[i * d + c] - G0[c];
      e[i * d + c] = x;
      e[(n + i) * d + c] = -x;
    }
}
// G = prev + g over d (a cumulative sum's next row; prev undefined: the first row).
template <typename T>
inline __attribute__((always_inline)) void cumulate_body(const T* __restrict prev, const T* __restrict g,
                                                         T* __restrict G, int64_t d) {
  for (int64_t c = 0; c < d; ++c) G[c] = (prev ? prev[c] : T(0)) + g[c];
}
// S[c, :] *= f[c] (f of one value when per_channel is false).
template <typename T>
inline __attribute__((always_inline)) void scale_rows_body(T* S, const T* f, int64_t rows, int64_t cols,
                                                           bool per_channel) {
  for (int64_t c = 0; c < rows; ++c) {
    const T fc = f[per_channel ? c : 0];
    T* __restrict row = S + c * cols;
    for (int64_t j = 0; j < cols; ++j) row[j] *= fc;
  }
}

#define CPBENCH_FUSED_LOOPS(T)                                                                               \
  CPBENCH_CLONES void invert_unit_lower(const T* A, int64_t lda, T* Ti, int64_t ldt, int64_t n) {            \
    invert_unit_lower_body(A, lda, Ti, ldt, n);                                                              \
  }                                                                                                          \
  CPBENCH_CLONES void decay_factors(const T* q, const T* k, const T* E, const T* Ei, T* xq, T* xk, T* ks,    \
                                    int64_t count) {                                                         \
    decay_factors_body(q, k, E, Ei, xq, xk, ks, count);                                                      \
  }                                                                                                          \
  CPBENCH_CLONES void relative_decays(const T* G, const T* G0, T* e, int64_t n, int64_t d) {                 \
    relative_decays_body(G, G0, e, n, d);                                                                    \
  }                                                                                                          \
  CPBENCH_CLONES void cumulate(const T* prev, const T* g, T* G, int64_t d) { cumulate_body(prev, g, G, d); } \
  CPBENCH_CLONES void scale_rows(T* S, const T* f, int64_t rows, int64_t cols, bool per_channel) {           \
    scale_rows_body(S, f, rows, cols, per_channel);                                                          \
  }
CPBENCH_FUSED_LOOPS(float)
CPBENCH_FUSED_LOOPS(double)
#undef CPBENCH_FUSED_LOOPS
#undef CPBENCH_CLONES

// The BLAS of torch's own build (MKL or OpenBLAS export the Fortran symbols), called directly: a
// chunk's matmuls are small (64 x 128 x 128), and ATen's per-call work is ~3 us of their ~8 us. Weak:
// where the library does not export them, ATen's matmul runs instead.
extern "C" {
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*, const float*, const int*,
            const float*, const int*, const float*, float*, const int*) __attribute__((weak));
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*, const double*, const int*,
            const double*, const int*, const double*, double*, const int*) __attribute__((weak));
}

// Row-major C [m, n] (stride ldc) = op(A) op(B) + (accumulate ? C : 0); op(A) [m, k] is A (stride lda) or,
// with ta, the transpose of A [k, m]; the same for B.
template <typename T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* A, int64_t lda, const T* B, int64_t ldb,
          bool accumulate, T* C, int64_t ldc) {
  const T one = 1, beta = accumulate ? T(1) : T(0);
  const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
  const int LA = static_cast<int>(lda), LB = static_cast<int>(ldb), LC = static_cast<int>(ldc);
  const char* opa = ta ? "T" : "N";
  const char* opb = tb ? "T" : "N";
  // Column-major BLAS sees the transposes: C^T = op(B)^T op(A)^T.
  if constexpr (std::is_same_v<T, float>) {
    if (sgemm_) return sgemm_(opb, opa, &N, &M, &K, &one, B, &LB, A, &LA, &beta, C, &LC);
  } else {
    if (dgemm_) return dgemm_(opb, opa, &N, &M, &K, &one, B, &LB, A, &LA, &beta, C, &LC);
  }
  const auto opts = at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value);
  const auto view = [&](const T* p, int64_t r, int64_t c, int64_t ld, bool t) {
    const at::Tensor x = at::from_blob(const_cast<T*>(p), {t ? c : r, t ? r : c}, {ld, 1}, opts);
    return t ? x.t() : x;
  };
  at::Tensor out = at::from_blob(C, {m, n}, {ldc, 1}, opts);
  if (accumulate)
    out.addmm_(view(A, m, k, lda, ta), view(B, k, n, ldb, tb));
  else
    at::mm_out(out, view(A, m, k, lda, ta), view(B, k, n, ldb, tb));
}

// Whole-tensor pointers and sizes; token t of row r, head h is ((r L + t) H + h) along each tensor.
template <typename T>
struct Rows {
  const T *q, *k, *v, *g, *beta;
  const int64_t* group;
  T *o, *state;
  int64_t L, H, dk, dv, Q, Gd;  // Gd = dk (one decay per key channel) or 1 (per head)
};

// One (row, head)'s chunks in order, in place on its state; the buffers hold one chunk (n <= Q tokens).
template <typename T>
class FusedHead {
 public:
  explicit FusedHead(const Rows<T>& a)
      : a_(a),
        dk_(a.dk),
        dv_(a.dv),
        Q_(a.Q),
        Gd_(a.Gd),
        ldt_((a.Q + 15) / 16 * 16),
        opts_(at::TensorOptions().dtype(c10::CppTypeToScalarType<T>::value)),
        grp_(Q_) {
    const std::pair<Buf*, int64_t> bufs[] = {{&qb_, Q_ * dk_},
                                             {&kb_, Q_ * dk_},
                                             {&vb_, Q_ * dv_},
                                             {&G_, Q_ * Gd_},
                                             {&ex_, 2 * Q_ * Gd_},
                                             {&D_, Gd_ == 1 ? Q_ * Q_ : 0},
                                             {&eb_, (2 * Q_ + 1) * dk_},
                                             {&xs_, 2 * Q_ * dk_},
                                             {&ks_, Q_ * dk_},
                                             {&PK_, 2 * Q_ * Q_},
                                             {&Ti_, Q_ * ldt_},
                                             {&R1_, Q_ * dv_},
                                             {&rhs_, Q_ * dv_},
                                             {&u_, Q_ * dv_},
                                             {&bt_, Q_},
                                             {&c0_, dk_},
                                             {&cmid_, dk_},
                                             {&cend_, dk_}};
    // One arena, each buffer 64 bytes further off a 4 KiB boundary than the one before: buffers of
    // whole pages at the same page offset make the streaming loops stall on 4K aliasing.
    const int64_t line = 64 / static_cast<int64_t>(sizeof(T)), n = static_cast<int64_t>(std::size(bufs));
    int64_t total = 0;
    for (const auto& b : bufs) total += (b.second + line - 1) / line * line + line;
    arena_.assign(static_cast<size_t>(total + 4096 / static_cast<int64_t>(sizeof(T))), T(0));
    T* p = arena_.data();
    for (int64_t i = 0; i < n; ++i) {
      bufs[i].first->p = p;
      p += (bufs[i].second + line - 1) / line * line + line;
    }
  }

  void run(int64_t r, int64_t h) {
    T* S = a_.state + (r * a_.H + h) * dk_ * dv_;
    for (int64_t t0 = 0; t0 < a_.L; t0 += Q_) chunk(r, h, t0, S);
  }

 private:
  void exp_inplace(T* p, int64_t count) const { at::from_blob(p, {count}, opts_).exp_(); }
  T* P(int64_t t) { return PK_.data() + t * Q_; }         // row t of the qk product
  T* K(int64_t t) { return PK_.data() + (n_ + t) * Q_; }  // row t of the kk product (then A)
  const T* Grow(int64_t t) const { return G_.data() + t * Gd_; }

  void chunk(int64_t r, int64_t h, int64_t t0, T* Sp) {
    const int64_t n = n_ = std::min(Q_, a_.L - t0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = (r * a_.L + t0 + i) * a_.H + h;
      std::copy_n(a_.q + b * dk_, dk_, qb_.data() + i * dk_);
      std::copy_n(a_.k + b * dk_, dk_, kb_.data() + i * dk_);
      std::copy_n(a_.v + b * dv_, dv_, vb_.data() + i * dv_);
      bt_[static_cast<size_t>(i)] = a_.beta[b];
      grp_[static_cast<size_t>(i)] = a_.group[r * a_.L + t0 + i];
      cumulate(i ? G_.data() + (i - 1) * Gd_ : nullptr, a_.g + b * Gd_, G_.data() + i * Gd_, Gd_);
    }
    // The group the entering state reaches: the previous token's (the row's first at the row start);
    // the chunk's last group.
    prev_ = t0 == 0 ? grp_[0] : a_.group[r * a_.L + t0 - 1];
    last_ = grp_[static_cast<size_t>(n - 1)];
    T range = 0;  // the largest per-channel decay over the chunk (g <= 0: G is non-increasing)
    for (int64_t c = 0; c < Gd_; ++c) range = std::max(range, std::abs(Grow(0)[c] - Grow(n - 1)[c]));
    if (Gd_ > 1 && range <= T(kFusedDecayRange))
      one_reference();
    else
      general_factors();
    // Pairs of one group only: s <= t for P, s < t for A = beta_t kk. Groups are runs: t's group starts
    // at from[t].
    int64_t from = 0;
    for (int64_t t = 0; t < n; ++t) {
      if (grp_[static_cast<size_t>(t)] != grp_[static_cast<size_t>(from)]) from = t;
      T *p = P(t), *kr = K(t);
      const T bt = bt_[static_cast<size_t>(t)];
      const T* d = Gd_ == 1 ? D_.data() + t * n : nullptr;
      for (int64_t s = 0; s < from; ++s) p[s] = kr[s] = T(0);
      if (d) {
        for (int64_t s = from; s <= t; ++s) p[s] *= d[s];
        for (int64_t s = from; s < t; ++s) kr[s] *= bt * d[s];
      } else {
        for (int64_t s = from; s < t; ++s) kr[s] *= bt;
      }
      kr[t] = T(0);
      for (int64_t s = t + 1; s < n; ++s) p[s] = kr[s] = T(0);
    }
    invert_unit_lower(K(0), Q_, Ti_.data(), ldt_, n);  // (I + A)^-1
    // With F = [F_q ; F_k] the rows' decays and S' = Diag(c0) S_in: [oq ; w] = F S', zero on the
    // tokens the entering state does not reach (those from the first reset on); u = (I + A)^-1 beta
    // (v - w); o = oq + P u; S_out = Diag(c_end) (Diag(c_mid) S_in + Kf^T u) over the last group's
    // tokens, Diag(c_mid) S_in = 0 past a reset.
    if (scaled_) scale_rows(Sp, c0_.data());
    T* o = a_.o + ((r * a_.L + t0) * a_.H + h) * dv_;
    const int64_t ld_o = a_.H * dv_;
    gemm(false, false, n, dv_, dk_, xs_.data(), dk_, Sp, dv_, false, o, ld_o);
    gemm(false, false, n, dv_, dk_, xs_.data() + n * dk_, dk_, Sp, dv_, false, R1_.data(), dv_);
    int64_t reached = 0;
    while (reached < n && grp_[static_cast<size_t>(reached)] == prev_) ++reached;
    for (int64_t i = reached; i < n; ++i) {
      std::fill_n(o + i * ld_o, dv_, T(0));
      std::fill_n(R1_.data() + i * dv_, dv_, T(0));
    }
    for (int64_t i = 0; i < n; ++i) {
      const T bt = bt_[static_cast<size_t>(i)];
      const T* __restrict vr = vb_.data() + i * dv_, * __restrict wr = R1_.data() + i * dv_;
      T* __restrict x = rhs_.data() + i * dv_;
      for (int64_t c = 0; c < dv_; ++c) x[c] = bt * (vr[c] - wr[c]);
    }
    gemm(false, false, n, dv_, n, Ti_.data(), ldt_, rhs_.data(), dv_, false, u_.data(), dv_);
    gemm(false, false, n, dv_, n, PK_.data(), Q_, u_.data(), dv_, true, o, ld_o);
    if (last_ != prev_)
      std::fill_n(Sp, dk_ * dv_, T(0));
    else if (!scaled_)
      scale_rows(Sp, cmid_.data());
    int64_t first_last = n - 1;
    while (first_last > 0 && grp_[static_cast<size_t>(first_last - 1)] == last_) --first_last;
    gemm(true, false, dk_, dv_, n - first_last, ks_.data() + first_last * dk_, dk_, u_.data() + first_last * dv_, dv_,
         true, Sp, dv_);
    if (scaled_) scale_rows(Sp, cend_.data());
  }

  void scale_rows(T* Sp, const T* f) const { cpbench::scale_rows(Sp, f, dk_, dv_, Gd_ > 1); }

  // Per key channel, the whole chunk within range: every factor from E = exp(G - G_0) and
  // Ei = exp(G_0 - G). P and K raw (before the masks) from [q E ; k E] (k Ei)^T; F = [q E ; k E] with
  // c0 = exp(G_0); Kf = k Ei with c_mid = c0, c_end = exp(G_end - G_0).
  void one_reference() {
    const int64_t n = n_;
    const T* G0 = Grow(0);
    T* e = eb_.data();
    relative_decays(G_.data(), G0, e, n, dk_);
    std::copy_n(G0, dk_, e + 2 * n * dk_);
    exp_inplace(e, (2 * n + 1) * dk_);
    const T *E = e, *Ei = e + n * dk_;
    decay_factors(qb_.data(), kb_.data(), E, Ei, xs_.data(), xs_.data() + n * dk_, ks_.data(), n * dk_);
    std::copy_n(e + 2 * n * dk_, dk_, c0_.data());
    std::copy_n(E + (n - 1) * dk_, dk_, cend_.data());
    scaled_ = true;
    gemm(false, true, 2 * n, n, dk_, xs_.data(), dk_, ks_.data(), dk_, false, PK_.data(), Q_);
  }

  // One decay per head, or per key channel beyond the range: exp(G) and exp(G_end - G) (both <= 1)
  // directly; the products as q k^T times exp(G_t - G_s) (per head) or by blocks (per channel).
  // F = [q exp(G) ; k exp(G)], Kf = k exp(G_end - G), c_mid = exp(G_end).
  void general_factors() {
    const int64_t n = n_;
    const T* Gend = Grow(n - 1);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < Gd_; ++c) {
        ex_[static_cast<size_t>(i * Gd_ + c)] = Grow(i)[c];
        ex_[static_cast<size_t>((n + i) * Gd_ + c)] = Gend[c] - Grow(i)[c];
      }
    exp_inplace(ex_.data(), 2 * n * Gd_);
    const T *eG = ex_.data(), *eEnd = ex_.data() + n * Gd_;
    if (Gd_ == 1) {
      std::copy_n(qb_.data(), n * dk_, xs_.data());
      std::copy_n(kb_.data(), n * dk_, xs_.data() + n * dk_);
      gemm(false, true, 2 * n, n, dk_, xs_.data(), dk_, kb_.data(), dk_, false, PK_.data(), Q_);
      for (int64_t t = 0; t < n; ++t)
        for (int64_t s = 0; s < n; ++s) D_[static_cast<size_t>(t * n + s)] = s <= t ? G_[t] - G_[s] : T(0);
      exp_inplace(D_.data(), n * n);
    } else {
      blocks(0, n);
    }
    for (int64_t i = 0; i < n; ++i) {
      const T *e = eG + i * Gd_, *ee = eEnd + i * Gd_, *kr = kb_.data() + i * dk_, *qr = qb_.data() + i * dk_;
      T *xq = xs_.data() + i * dk_, *xk = xs_.data() + (n + i) * dk_, *kf = ks_.data() + i * dk_;
      for (int64_t c = 0; c < dk_; ++c) {
        const int64_t gc = Gd_ == 1 ? 0 : c;
        xq[c] = qr[c] * e[gc];
        xk[c] = kr[c] * e[gc];
        kf[c] = kr[c] * ee[gc];
      }
    }
    std::copy_n(eG + (n - 1) * Gd_, Gd_, cmid_.data());
    scaled_ = false;
  }

  // The per-channel products of tokens [lo, hi) into P and K (rows t, columns s <= t; what lies above
  // the diagonal is masked afterwards): one reference where the block's decays stay within range,
  // else its halves and the pairs across them.
  void blocks(int64_t lo, int64_t hi) {
    if (hi - lo == 1) {
      T dot = 0;
      for (int64_t c = 0; c < dk_; ++c)
        dot += qb_[static_cast<size_t>(lo * dk_ + c)] * kb_[static_cast<size_t>(lo * dk_ + c)];
      P(lo)[lo] = dot;
      K(lo)[lo] = 0;
      return;
    }
    T range = 0;
    for (int64_t s = lo + 1; s < hi; ++s)
      for (int64_t c = 0; c < dk_; ++c) range = std::max(range, std::abs(Grow(s)[c] - Grow(lo)[c]));
    if (range <= T(kFusedDecayRange)) return decayed_block(lo, hi, lo, hi, lo);
    const int64_t mid = lo + (hi - lo) / 2;
    blocks(lo, mid);
    blocks(mid, hi);
    decayed_block(mid, hi, lo, mid, mid);
  }

  // Rows [r0, r1) x columns [c0, c1) of both products, as (x_t exp(G_t - G_ref)) (k_s exp(G_ref - G_s))^T.
  void decayed_block(int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t ref) {
    const int64_t nr = r1 - r0, nc = c1 - c0;
    const T* Gr = Grow(ref);
    for (int64_t i = 0; i < nr; ++i)
      for (int64_t c = 0; c < dk_; ++c) eb_[static_cast<size_t>(i * dk_ + c)] = Grow(r0 + i)[c] - Gr[c];
    for (int64_t j = 0; j < nc; ++j)
      for (int64_t c = 0; c < dk_; ++c) eb_[static_cast<size_t>((nr + j) * dk_ + c)] = Gr[c] - Grow(c0 + j)[c];
    exp_inplace(eb_.data(), (nr + nc) * dk_);
    for (int64_t i = 0; i < nr; ++i) {
      const T *e = eb_.data() + i * dk_, *qr = qb_.data() + (r0 + i) * dk_, *kr = kb_.data() + (r0 + i) * dk_;
      T *xq = xs_.data() + i * dk_, *xk = xs_.data() + (nr + i) * dk_;
      for (int64_t c = 0; c < dk_; ++c) {
        xq[c] = qr[c] * e[c];
        xk[c] = kr[c] * e[c];
      }
    }
    for (int64_t j = 0; j < nc; ++j) {
      const T *e = eb_.data() + (nr + j) * dk_, *kr = kb_.data() + (c0 + j) * dk_;
      T* x = ks_.data() + j * dk_;
      for (int64_t c = 0; c < dk_; ++c) x[c] = kr[c] * e[c];
    }
    if (r0 == 0 && nr == n_)  // P's and K's rows are adjacent: one product
      return gemm(false, true, 2 * nr, nc, dk_, xs_.data(), dk_, ks_.data(), dk_, false, PK_.data() + c0, Q_);
    gemm(false, true, nr, nc, dk_, xs_.data(), dk_, ks_.data(), dk_, false, P(r0) + c0, Q_);
    gemm(false, true, nr, nc, dk_, xs_.data() + nr * dk_, dk_, ks_.data(), dk_, false, K(r0) + c0, Q_);
  }

  Rows<T> a_;
  int64_t dk_, dv_, Q_, Gd_, ldt_, n_ = 0, prev_ = 0, last_ = 0;
  at::TensorOptions opts_;
  struct Buf {  // a stretch of arena_
    T* p = nullptr;
    T* data() const { return p; }
    T& operator[](size_t i) const { return p[i]; }
  };
  std::vector<T> arena_;
  Buf qb_, kb_, vb_, G_, ex_, D_, eb_, xs_, ks_, PK_, Ti_, R1_, rhs_, u_, bt_, c0_, cmid_, cend_;
  bool scaled_ = false;  // c0 = c_mid and c_end apply (one reference); else c0 = c_end = 1
  std::vector<int64_t> grp_;
};

template <typename T>
void fused_rows(const Rows<T>& a, int64_t R) {
  at::parallel_for(0, R * a.H, 1, [&](int64_t b0, int64_t b1) {
    FusedHead<T> head(a);
    for (int64_t b = b0; b < b1; ++b) head.run(b / a.H, b % a.H);
  });
}

}  // namespace

GdnScanResult delta_rule_fused_scan(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                    const at::Tensor& g_in, const at::Tensor& beta_in, const at::Tensor& group_in,
                                    int64_t chunk, const at::Tensor& initial) {
  const auto st = q_in.scalar_type();
  CP_CHECK(st == at::kFloat || st == at::kDouble, "delta_rule_fused_scan: float32 or float64 inputs, got ", st);
  CP_CHECK(chunk >= 1 && q_in.size(1) >= 1, "delta_rule_fused_scan: chunk ", chunk, ", tokens ", q_in.size(1));
  const at::Tensor q = q_in.contiguous(), k = k_in.to(st).contiguous(), v = v_in.to(st).contiguous();
  const at::Tensor g = g_in.to(st).contiguous(), beta = beta_in.to(st).contiguous(), group = group_in.contiguous();
  const int64_t R = q.size(0), L = q.size(1), H = q.size(2), dk = q.size(3), dv = v.size(3);
  at::Tensor o = at::empty({R, L, H, dv}, q.options());
  at::Tensor state =
      initial.defined() ? initial.to(st).clone(at::MemoryFormat::Contiguous) : at::zeros({R, H, dk, dv}, q.options());
  AT_DISPATCH_FLOATING_TYPES(st, "delta_rule_fused_scan", [&] {
    const Rows<scalar_t> rows{q.data_ptr<scalar_t>(),
                              k.data_ptr<scalar_t>(),
                              v.data_ptr<scalar_t>(),
                              g.data_ptr<scalar_t>(),
                              beta.data_ptr<scalar_t>(),
                              group.data_ptr<int64_t>(),
                              o.data_ptr<scalar_t>(),
                              state.data_ptr<scalar_t>(),
                              L,
                              H,
                              dk,
                              dv,
                              std::min(chunk, L),
                              g.dim() == 4 ? dk : 1};
    fused_rows(rows, R);
  });
  return {o, state};
}

}  // namespace cpbench
