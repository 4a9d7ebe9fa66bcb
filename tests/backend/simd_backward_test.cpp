// Tests of the vectorised gradient and softmax pieces in src/backend/cpu/simd_math.cpp on every
// instruction set compiled in that this CPU supports: simd_binary (the gelu gradients) against a
// reference one precision up, simd_max and simd_exp_shifted against std:: over lengths with
// tails, unaligned starts, NaN and infinities, and no writes past the end; each kernel with an
// epilogue against two passes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/simd_math.h"
#include "backend/kernels.h"

using namespace adjoint;
using kernels::Binary;

namespace {

// Runs f once per instruction set, pinned, and restores the best one after.
template <class F>
void for_each_target(F f) {
  const std::vector<std::string> targets = kernels::simd_targets();
  ASSERT_FALSE(targets.empty());
  for (std::size_t t = 0; t < targets.size(); ++t) {
    kernels::simd_pin_target_for_test(static_cast<int>(t));
    SCOPED_TRACE(targets[t]);
    f(targets[t]);
  }
  kernels::simd_pin_target_for_test(-1);
}

// gelu'(x) in the wider type W: the tanh form as s (1 + x (1 - s) v'), the erf form as
// Phi(x) + x phi(x) with Phi from erfc (no cancellation in either).
template <class W>
W gelu_grad_ref(Binary k, W x) {
  if (k == Binary::GeluTanhBackward) {
    const W k2 = 2 * std::sqrt(W(2) / W(M_PI)), c = W(0.044715);
    const W v = x * k2 * (1 + c * x * x), dv = k2 * (1 + 3 * c * x * x);
    const W s = 1 / (1 + std::exp(-v)), sc = 1 / (1 + std::exp(v));
    return s * (1 + x * sc * dv);
  }
  const W cdf = W(0.5) * std::erfc(-x / std::sqrt(W(2)));
  const W pdf = std::exp(-x * x / 2) / std::sqrt(2 * W(M_PI));
  return cdf + x * pdf;
}

// The values checked: a dense grid over [-12, 12] plus zeros, tiny and huge magnitudes.
template <class T>
std::vector<T> grid() {
  std::vector<T> xs;
  for (int i = -24000; i <= 24000; ++i) xs.push_back(static_cast<T>(i * 0.0005));
  for (T v : {T(0), T(-0.0), T(1e-30), T(-1e-30), T(30), T(-30), T(1e4), T(-1e4)}) xs.push_back(v);
  return xs;
}

template <class T, class W>
void check_gelu_grads() {
  const std::vector<T> xs = grid<T>();
  std::vector<T> gy(xs.size());
  std::mt19937 rng(1);
  std::normal_distribution<double> nd;
  for (T& g : gy) g = static_cast<T>(nd(rng));
  for_each_target([&](const std::string&) {
    for (Binary k : {Binary::GeluTanhBackward, Binary::GeluErfBackward}) {
      std::vector<T> out(xs.size());
      ASSERT_TRUE(kernels::simd_binary(k, gy.data(), xs.data(), out.data(),
                                       static_cast<int64_t>(xs.size())));
      const double eps = std::numeric_limits<T>::epsilon();
      double worst = 0;
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const W want = W(gy[i]) * gelu_grad_ref<W>(k, W(xs[i]));
        // gelu' lies in [-0.17, 1.13]: errors are measured against |gy| (absolute in gelu'),
        // plus eps |x| for the rounding of x itself in the argument of tanh or erf.
        const double scale = std::abs(double(gy[i])) * (1 + std::abs(double(xs[i])));
        const double err = std::abs(double(out[i]) - double(want)) / (eps * scale);
        worst = std::max(worst, err);
      }
      EXPECT_LE(worst, 8) << (k == Binary::GeluTanhBackward ? "tanh" : "erf");
    }
  });
}

TEST(SimdBackward, GeluGradFloat32) { check_gelu_grads<float, double>(); }
TEST(SimdBackward, GeluGradFloat64) { check_gelu_grads<double, long double>(); }

TEST(SimdBackward, GeluGradNaNAndOtherKinds) {
  for_each_target([](const std::string&) {
    const float x[3] = {std::nanf(""), 1.0f, -1.0f}, g[3] = {1, 1, 1};
    float out[3];
    ASSERT_TRUE(kernels::simd_binary(Binary::GeluTanhBackward, g, x, out, 3));
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_FALSE(std::isnan(out[1]));
    ASSERT_TRUE(kernels::simd_binary(Binary::GeluErfBackward, g, x, out, 3));
    EXPECT_TRUE(std::isnan(out[0]));
  });
  float o = 7;
  const float one = 1;
  EXPECT_FALSE(kernels::simd_binary(Binary::Pow, &one, &one, &o, 1));
  EXPECT_EQ(o, 7);
  EXPECT_TRUE(kernels::simd_binary_handles(Binary::GeluErfBackward));
  EXPECT_TRUE(kernels::simd_binary_handles(Binary::TanhBackward));
  EXPECT_FALSE(kernels::simd_binary_handles(Binary::Eq));
}

template <class T>
void check_max_and_exp() {
  std::mt19937 rng(2);
  std::normal_distribution<double> nd(0, 10);
  for_each_target([&](const std::string&) {
    for (int64_t n = 0; n <= 40; ++n) {
      for (int64_t off = 0; off < 3; ++off) {
        std::vector<T> buf(n + off + 4, T(123));
        T* x = buf.data() + off;
        for (int64_t i = 0; i < n; ++i) x[i] = static_cast<T>(nd(rng));
        T want = -std::numeric_limits<T>::infinity();
        for (int64_t i = 0; i < n; ++i) want = std::max(want, x[i]);
        EXPECT_EQ(kernels::simd_max(x, n), want) << "n " << n;
        if (n > 0) {
          // A NaN at any position poisons the max.
          const int64_t at = static_cast<int64_t>(rng() % n);
          const T keep = x[at];
          x[at] = std::numeric_limits<T>::quiet_NaN();
          EXPECT_TRUE(std::isnan(kernels::simd_max(x, n))) << "n " << n << " at " << at;
          x[at] = keep;
        }
        std::vector<T> y(n + 4, T(-5));
        kernels::simd_exp_shifted(x, want, y.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          // x - shift is rounded to T first, as the kernel does
          const double ref = std::exp(static_cast<long double>(static_cast<T>(x[i] - want)));
          EXPECT_NEAR(y[i], ref, 2 * std::numeric_limits<T>::epsilon() * ref) << i;
        }
        for (int64_t i = n; i < n + 4; ++i) EXPECT_EQ(y[i], T(-5)) << "wrote past the end";
      }
    }
    // Infinities: exp(-inf - m) = 0, and an all -inf row has max -inf.
    const T inf = std::numeric_limits<T>::infinity();
    const T row[5] = {-inf, T(1), -inf, T(2), -inf};
    EXPECT_EQ(kernels::simd_max(row, 5), T(2));
    T e[5];
    kernels::simd_exp_shifted(row, T(2), e, 5);
    EXPECT_EQ(e[0], T(0));
    EXPECT_EQ(e[3], T(1));
    const T neg[3] = {-inf, -inf, -inf};
    EXPECT_EQ(kernels::simd_max(neg, 3), -inf);
  });
}

TEST(SimdBackward, MaxAndShiftedExpFloat32) { check_max_and_exp<float>(); }
TEST(SimdBackward, MaxAndShiftedExpFloat64) { check_max_and_exp<double>(); }

// A kernel with an epilogue or a prologue (compile's fused loop merges a mul or add by a
// constant into the pass before or after it) gives the bits of the separate passes, for every
// vectorised kind, both steps, both dtypes and every instruction set; lengths with tails.
template <class T>
void check_epilogues() {
  using kernels::ScalarStep;
  using kernels::Unary;
  std::mt19937 rng(3);
  std::normal_distribution<double> nd(0, 2);
  const int64_t n = 1000 + 7;
  std::vector<T> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) {
    x[static_cast<std::size_t>(i)] = static_cast<T>(nd(rng));
    y[static_cast<std::size_t>(i)] = static_cast<T>(std::abs(nd(rng)) + 0.1);
  }
  x[0] = T(0), x[1] = T(-0.0), x[2] = std::numeric_limits<T>::infinity(), x[3] = T(1e30);
  const std::pair<ScalarStep, Unary> epilogues[] = {{ScalarStep::MulScalar, Unary::MulScalar},
                                                    {ScalarStep::AddScalar, Unary::AddScalar}};
  const T e = static_cast<T>(0.7071067811865476);  // rounded in T: the kernels take T
  for_each_target([&](const std::string&) {
    int checked = 0;
    for (auto [epilogue, scalar_kind] : epilogues) {
      const kernels::SimdUnaryFn<T> second = kernels::simd_unary_fn<T>(scalar_kind, e);
      ASSERT_NE(second, nullptr);
      std::vector<T> want(n), got(n);
      auto expect_equal = [&](const std::string& what) {
        second(want.data(), want.data(), static_cast<std::size_t>(n), e, 0, 0);
        ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0) << what;
        ++checked;
      };
      for (int k = 0; k <= static_cast<int>(Unary::LogicalNot); ++k) {
        const Unary kind = static_cast<Unary>(k);
        for (double a : {2.0, 3.0, 0.25}) {  // the parameter (pow's 2 and 3; softplus's beta)
          if (!kernels::simd_unary_handles(kind, a)) continue;
          const T ta = static_cast<T>(a), tb = T(20);
          kernels::simd_unary_fn<T>(kind, a)(x.data(), want.data(), n, ta, tb, 0);
          kernels::simd_unary_fn<T>(kind, a, epilogue)(x.data(), got.data(), n, ta, tb, e);
          expect_equal("unary kind " + std::to_string(k));
        }
      }
      for (int k = 0; k <= static_cast<int>(Binary::Or); ++k) {
        const Binary kind = static_cast<Binary>(k);
        if (!kernels::simd_binary_handles(kind)) continue;
        kernels::simd_binary_fn<T>(kind)(x.data(), y.data(), want.data(), n, 0, 0, 0);
        kernels::simd_binary_fn<T>(kind, epilogue)(x.data(), y.data(), got.data(), n, 0, 0, e);
        expect_equal("binary kind " + std::to_string(k));
      }
      // A prologue (Add and Mul only) on either operand, with and without an epilogue: the
      // bits of the step's pass over that operand first.
      const T pv = static_cast<T>(-1.25e-3);
      std::vector<T> stepped(n);
      for (Binary kind : {Binary::Add, Binary::Mul}) {
        for (int operand : {0, 1}) {
          const ScalarStep pa = operand == 0 ? epilogue : ScalarStep::None;
          const ScalarStep pb = operand == 0 ? ScalarStep::None : epilogue;
          kernels::simd_unary_fn<T>(scalar_kind, pv)(operand == 0 ? x.data() : y.data(),
                                                     stepped.data(), n, pv, 0, 0);
          const T* a = operand == 0 ? stepped.data() : x.data();
          const T* b = operand == 0 ? y.data() : stepped.data();
          for (ScalarStep after : {ScalarStep::None, epilogue}) {
            kernels::simd_binary_fn<T>(kind)(a, b, want.data(), n, 0, 0, 0);
            kernels::simd_binary_fn<T>(kind, after, pa, pb)(x.data(), y.data(), got.data(), n, pv,
                                                            pv, e);
            if (after == ScalarStep::None) {
              ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)), 0);
              ++checked;
            } else {
              expect_equal("prologue on operand " + std::to_string(operand));
            }
          }
        }
      }
      EXPECT_EQ(kernels::simd_binary_fn<T>(Binary::Div, ScalarStep::None, epilogue), nullptr);
      EXPECT_EQ(kernels::simd_binary_fn<T>(Binary::Mul, ScalarStep::None, epilogue, epilogue),
                nullptr);
    }
    EXPECT_GT(checked, 60);
  });
}

TEST(SimdBackward, ScalarStepsGiveTheBitsOfSeparatePassesFloat32) { check_epilogues<float>(); }
TEST(SimdBackward, ScalarStepsGiveTheBitsOfSeparatePassesFloat64) { check_epilogues<double>(); }

}  // namespace
