// Tests of the vectorised unary kernels (src/backend/cpu/simd_math.cpp), on every instruction
// set compiled in that this CPU supports. References are computed one precision up (double for
// float32, long double for float64) with std:: functions and rounded, so errors are in ulps of
// the true result. Also: lengths and unaligned starts, in-place use, no writes past the end,
// position independence, and agreement with the scalar kernels and std:: via the public API.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "backend/cpu/simd_math.h"
#include "backend/kernels.h"

using namespace adjoint;
using kernels::Unary;

namespace {

const Unary kHandled[] = {Unary::Exp,     Unary::Expm1, Unary::Log,     Unary::Log1p,
                          Unary::Sqrt,    Unary::Rsqrt, Unary::Tanh,    Unary::Erf,
                          Unary::Sigmoid, Unary::Silu,  Unary::GeluErf, Unary::GeluTanh,
                          Unary::Softplus};

const char* name(Unary k) { return kernels::kind_name(k); }

// Softplus is tested with beta = 2 (exact products, so the threshold test is the kernel's own)
// and threshold 20, as the ops layer passes them.
constexpr double kBeta = 2, kThreshold = 20;

template <class W>
W sigmoid_ref(W x) {
  return x >= 0 ? W(1) / (W(1) + std::exp(-x)) : std::exp(x) / (W(1) + std::exp(x));
}

// The true value of kind at x (a T), computed in the wider type W and rounded to T.
template <class T, class W>
T reference(Unary k, T xt) {
  const W x = xt;
  switch (k) {
    case Unary::Exp:
      return T(std::exp(x));
    case Unary::Expm1:
      return T(std::expm1(x));
    case Unary::Log:
      return T(std::log(x));
    case Unary::Log1p:
      return T(std::log1p(x));
    case Unary::Sqrt:  // correctly rounded in T already (in W it would round twice)
      return std::sqrt(xt);
    case Unary::Rsqrt:  // the scalar kernel's two correctly rounded steps
      return T(1) / std::sqrt(xt);
    case Unary::Tanh:
      return T(std::tanh(x));
    case Unary::Erf:
      return T(std::erf(x));
    case Unary::Sigmoid:
      return T(sigmoid_ref(x));
    case Unary::Silu:
      return T(x * sigmoid_ref(x));
    case Unary::GeluErf:  // 0.5 x (1 + erf(x / sqrt 2)) without cancellation
      return T(W(0.5) * x * std::erfc(-x / std::sqrt(W(2))));
    case Unary::GeluTanh: {  // 0.5 x (1 + tanh u) = x sigmoid(2u), without cancellation
      const W u = std::sqrt(W(2) / W(M_PI)) * (x + W(0.044715) * x * x * x);
      return T(x * sigmoid_ref(2 * u));
    }
    case Unary::Softplus:  // the branch is taken on the T product, as the kernels do
      return xt * T(kBeta) > T(kThreshold) ? xt : T(std::log1p(std::exp(W(kBeta) * x)) / W(kBeta));
    default:
      return T(0);
  }
}

// Tolerances, as measured on AVX2, SSE4, SSSE3 and SCALAR plus a little margin: ulps of the true
// result, and for the gelus also eps |x| absolute. That term is the conditioning of the formula
// in T: the rounding of x / sqrt 2 or of u = sqrt(2/pi)(x + 0.044715 x^3) moves the deep
// negative tail by many ulps of its tiny value, and the scalar kernel's 1 + erf (1 + tanh)
// cancels there, losing eps |x| / 2 itself. Every kind also accepts an absolute error of
// max(1, |x|) denorm_min: silu(-100) in float32 is x times a subnormal sigmoid, which has lost
// its relative precision (the scalar kernel rounds the same way).
struct Tolerance {
  double ulps;
  bool eps_abs_x;
};
Tolerance tolerance(Unary k) {
  switch (k) {
    case Unary::Sqrt:
    case Unary::Rsqrt:
      return {0, false};
    case Unary::Exp:
    case Unary::Erf:
      return {2, false};
    // Measured on [-3, 3]: gelu_erf <= 8 ulps (erfc = 1 - erf just below |x| / sqrt 2 = 1),
    // gelu_tanh <= 15 (rounding of u); the scalar formulas reach 100 and 200 there.
    case Unary::GeluErf:
    case Unary::GeluTanh:
      return {8, true};
    default:
      return {4, false};
  }
}

// Distance in representable values (ulps), with +0 and -0 equal.
template <class T>
long double ulp_distance(T a, T b) {
  using I = std::conditional_t<sizeof(T) == 4, int32_t, int64_t>;
  auto ordered = [](T v) {
    I i;
    std::memcpy(&i, &v, sizeof i);
    return i < 0 ? static_cast<long double>(std::numeric_limits<I>::min()) - i
                 : static_cast<long double>(i);
  };
  return std::fabs(ordered(a) - ordered(b));
}

// Empty string when got is within tolerance of want at x, else a description.
template <class T>
std::string mismatch(Unary k, T x, T got, T want, long double* worst_ulps = nullptr) {
  const bool got_nan = std::isnan(got), want_nan = std::isnan(want);
  if (got_nan || want_nan) {
    if (got_nan == want_nan) return "";
  } else if (std::isinf(got) || std::isinf(want)) {
    if (got == want) return "";
  } else {
    const long double ulps = ulp_distance(got, want);
    const long double err = std::fabs(static_cast<long double>(got) - want);
    const long double ax = std::fabs(static_cast<long double>(x));
    const Tolerance tol = tolerance(k);
    if (ulps <= tol.ulps) {
      if (worst_ulps && ulps > *worst_ulps) *worst_ulps = ulps;
      return "";
    }
    if (tol.eps_abs_x && err <= std::numeric_limits<T>::epsilon() * ax) return "";
    if (err <= std::max(1.0L, ax) * std::numeric_limits<T>::denorm_min()) return "";
  }
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s(%.17g) = %.17g, want %.17g", name(k), double(x), double(got),
                double(want));
  return buf;
}

template <class T>
std::vector<T> special_values() {
  const T inf = std::numeric_limits<T>::infinity(), big = std::numeric_limits<T>::max();
  std::vector<T> mags = {std::numeric_limits<T>::denorm_min(),
                         std::numeric_limits<T>::min(),
                         T(1e-30),
                         T(1e-10),
                         T(1e-7),
                         T(1e-5),
                         T(1e-3),
                         T(0.1),
                         T(0.25),
                         T(0.5),
                         T(0.75),
                         T(0.84375),
                         T(0.9),
                         T(1),
                         T(1.25),
                         T(1.5),
                         T(2),
                         T(2.5),
                         T(2.857142857),
                         T(3),
                         T(3.92),
                         T(4),
                         T(5),
                         T(5.66),
                         T(5.92),
                         T(6),
                         T(7),
                         T(8.5),
                         T(10),
                         T(15),
                         T(18.7),
                         T(18.72),
                         T(20),
                         T(25),
                         T(30),
                         T(50),
                         T(80),
                         T(88.72),
                         T(88.73),
                         T(89),
                         T(100),
                         T(103.97),
                         T(104),
                         T(105),
                         T(200),
                         T(1000),
                         T(1001),
                         T(1e4),
                         T(1e6),
                         T(1e15),
                         T(1e30),
                         big};
  if constexpr (sizeof(T) == 8)
    for (double m : {706.0, 709.78, 709.79, 745.1, 746.0, 1e100, 1e300}) mags.push_back(m);
  std::vector<T> v = {T(0), -T(0), inf, -inf, std::numeric_limits<T>::quiet_NaN()};
  for (T m : mags)
    for (T s : {T(1), T(-1)})
      for (T x : {m, std::nextafter(m, T(0)), std::nextafter(m, inf)}) v.push_back(s * x);
  // Around log1p's pole and a sweep over where the functions bend.
  for (T x : {T(-0.9999), std::nextafter(T(-1), T(0)), std::nextafter(T(-1), T(-2))})
    v.push_back(x);
  for (int i = -20000; i <= 20000; ++i) v.push_back(T(i) * T(12.0 / 20000));
  // Magnitudes across the whole exponent range, both signs.
  std::mt19937_64 rng(7);
  const double lo = std::log(double(std::numeric_limits<T>::min())), hi = std::log(double(big));
  std::uniform_real_distribution<double> exponent(lo, hi);
  for (int i = 0; i < 4000; ++i) {
    T m = T(std::exp(exponent(rng)));
    v.push_back(i % 2 ? m : -m);
  }
  return v;
}

// Runs f once per instruction set (pinned), then restores the best one.
template <class F>
void for_each_target(F f) {
  const std::vector<std::string> targets = kernels::simd_targets();
  ASSERT_FALSE(targets.empty());
  for (size_t i = 0; i < targets.size(); ++i) {
    kernels::simd_pin_target_for_test(static_cast<int>(i));
    SCOPED_TRACE("target " + targets[i]);
    EXPECT_EQ(kernels::simd_active_target(), targets[i]);
    f(targets[i]);
  }
  kernels::simd_pin_target_for_test(-1);
}

template <class T, class W>
void check_against_libm() {
  const std::vector<T> x = special_values<T>();
  for_each_target([&](const std::string& target) {
    for (Unary k : kHandled) {
      std::vector<T> y(x.size());
      ASSERT_TRUE(kernels::simd_unary(k, x.data(), y.data(), int64_t(x.size()), kBeta, kThreshold));
      int failures = 0;
      long double worst = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        std::string m = mismatch(k, x[i], y[i], reference<T, W>(k, x[i]), &worst);
        if (!m.empty() && ++failures <= 5) ADD_FAILURE() << target << ": " << m;
      }
      EXPECT_EQ(failures, 0) << target << " " << name(k);
      std::printf("  %-8s %-10s max %.0Lf ulp\n", target.c_str(), name(k), worst);
    }
  });
}

TEST(SimdMath, HandlesTheKindsItHasOnly) {
  for (Unary k : kHandled) EXPECT_TRUE(kernels::simd_unary_handles(k)) << name(k);
  EXPECT_TRUE(kernels::simd_unary_handles(Unary::Relu));  // exact: in the bitwise test below
  float f = 1, g = 0;
  for (Unary k : {Unary::Sin, Unary::PowScalar, Unary::EqScalar, Unary::LeakyRelu}) {
    EXPECT_FALSE(kernels::simd_unary_handles(k));
    EXPECT_FALSE(kernels::simd_unary(k, &f, &g, 1, 2.5));
    EXPECT_EQ(g, 0);  // nothing written
  }
  EXPECT_TRUE(kernels::simd_unary_handles(Unary::PowScalar, 3));
  EXPECT_FALSE(kernels::simd_unary_handles(Unary::PowScalar, 2.5));
}

// The arithmetic kinds and the exact activation gradients round once per operation (or only
// choose), so every instruction set must give the scalar loop's bits, signed zeros and NaNs
// included (compile's fused loops rely on it).
template <class T>
void check_arithmetic_bitwise() {
  std::vector<T> x = special_values<T>();
  x.push_back(T(0));
  x.push_back(-T(0));
  std::vector<T> y(x.rbegin(), x.rend());
  const T a = T(0.7);
  auto same = [](T p, T q) {
    return std::memcmp(&p, &q, sizeof(T)) == 0 || (std::isnan(p) && std::isnan(q));
  };
  struct UnaryCase {
    Unary k;
    double param;
    T (*ref)(T, T);
  };
  const UnaryCase unary_cases[] = {
      {Unary::Neg, 0, [](T v, T) { return T(0) - v; }},
      {Unary::AddScalar, 0.7, [](T v, T s) { return v + s; }},
      {Unary::MulScalar, 0.7, [](T v, T s) { return v * s; }},
      {Unary::RSubScalar, 0.7, [](T v, T s) { return s - v; }},
      {Unary::RDivScalar, 0.7, [](T v, T s) { return s / v; }},
      {Unary::Square, 0, [](T v, T) { return v * v; }},
      {Unary::Relu, 0, [](T v, T) { return v < T(0) ? T(0) : v; }},
      {Unary::PowScalar, 2, [](T v, T) { return v * v; }},
      {Unary::PowScalar, 3, [](T v, T) { return v * v * v; }},
  };
  const std::pair<kernels::Binary, T (*)(T, T)> binary_cases[] = {
      {kernels::Binary::Add, [](T p, T q) { return p + q; }},
      {kernels::Binary::Sub, [](T p, T q) { return p - q; }},
      {kernels::Binary::Mul, [](T p, T q) { return p * q; }},
      {kernels::Binary::Div, [](T p, T q) { return p / q; }},
      {kernels::Binary::Minimum, [](T p, T q) { return (p < q || std::isnan(p)) ? p : q; }},
      {kernels::Binary::Maximum, [](T p, T q) { return (p > q || std::isnan(p)) ? p : q; }},
      {kernels::Binary::TanhBackward, [](T g, T v) { return g * (T(1) - v * v); }},
      {kernels::Binary::SigmoidBackward, [](T g, T v) { return g * v * (T(1) - v); }},
      {kernels::Binary::ReluBackward, [](T g, T v) { return v <= T(0) ? T(0) : g; }},
  };
  for_each_target([&](const std::string& target) {
    std::vector<T> out(x.size());
    for (const UnaryCase& c : unary_cases) {
      ASSERT_TRUE(kernels::simd_unary(c.k, x.data(), out.data(), int64_t(x.size()), c.param));
      for (size_t i = 0; i < x.size(); ++i)
        EXPECT_TRUE(same(out[i], c.ref(x[i], c.k == Unary::PowScalar ? T(0) : a)))
            << target << " " << name(c.k) << " of " << x[i];
    }
    for (const auto& [k, ref] : binary_cases) {
      ASSERT_TRUE(kernels::simd_binary(k, x.data(), y.data(), out.data(), int64_t(x.size())));
      for (size_t i = 0; i < x.size(); ++i)
        EXPECT_TRUE(same(out[i], ref(x[i], y[i])))
            << target << " binary kind " << int(k) << " of " << x[i] << ", " << y[i];
    }
  });
}

TEST(SimdMath, ArithmeticIsBitwiseTheScalarLoop) {
  check_arithmetic_bitwise<float>();
  check_arithmetic_bitwise<double>();
}

TEST(SimdMath, Float32MatchesLibm) { check_against_libm<float, double>(); }
TEST(SimdMath, Float64MatchesLibm) { check_against_libm<double, long double>(); }

// Every length and start: the result at each position equals, bit for bit, that element
// computed alone (so parallel chunking cannot change a value); nothing outside [0, n) is
// written; in place gives the same bits.
template <class T>
void check_lengths_and_offsets() {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> dist(-9, 9);
  std::vector<T> src(1100);
  for (T& v : src) v = T(dist(rng));
  const T sentinel = T(-12345.5);
  for_each_target([&](const std::string&) {
    for (Unary k : kHandled) {
      // Each element alone (n = 1: the partial-vector path).
      std::vector<T> alone(src.size());
      for (size_t i = 0; i < src.size(); ++i)
        kernels::simd_unary(k, &src[i], &alone[i], 1, kBeta, kThreshold);
      for (int64_t n : {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 1000, 1001}) {
        for (int64_t offset : {0, 1, 2, 3}) {
          std::vector<T> out(n + 16, sentinel);
          const T* in = src.data() + offset;
          kernels::simd_unary(k, in, out.data() + offset, n, kBeta, kThreshold);
          for (int64_t i = 0; i < int64_t(out.size()); ++i) {
            if (i < offset || i >= offset + n) {
              ASSERT_EQ(out[i], sentinel) << name(k) << " wrote outside at " << i;
            } else {
              ASSERT_EQ(std::memcmp(&out[i], &alone[i], sizeof(T)), 0)
                  << name(k) << " n=" << n << " offset=" << offset << " i=" << i;
            }
          }
          std::vector<T> inplace(src.begin() + offset, src.begin() + offset + n);
          kernels::simd_unary(k, inplace.data(), inplace.data(), n, kBeta, kThreshold);
          if (n > 0) {  // memcmp on an empty vector's null data() is undefined
            ASSERT_EQ(std::memcmp(inplace.data(), out.data() + offset, n * sizeof(T)), 0)
                << name(k) << " in place, n=" << n;
          }
        }
      }
    }
  });
}

// The float32 tanh is ours (TanhF32 in simd_math-inl.h), measured at 1.48 ulp at most over every
// float32 on every target. Here every 61st bit pattern of [0, 12] (past 9.02 the result is 1),
// and their negations, exactly the negated results: within 1.5 ulp on each target.
TEST(SimdMath, Float32TanhWithinOneAndAHalfUlpsDensely) {
  std::vector<float> x;
  const uint32_t end = std::bit_cast<uint32_t>(12.0f);
  for (uint32_t b = 0; b < end; b += 61) x.push_back(std::bit_cast<float>(b));
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = std::tanh(double(x[i]));
  std::vector<float> neg(x.size());
  for (size_t i = 0; i < x.size(); ++i) neg[i] = -x[i];
  for_each_target([&](const std::string& target) {
    std::vector<float> y(x.size()), yn(x.size());
    ASSERT_TRUE(kernels::simd_unary(Unary::Tanh, x.data(), y.data(), int64_t(x.size())));
    ASSERT_TRUE(kernels::simd_unary(Unary::Tanh, neg.data(), yn.data(), int64_t(x.size())));
    double worst = 0;
    float worst_at = 0;
    int asymmetric = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float rounded = float(want[i]);
      const double ulp = double(std::nextafter(rounded, INFINITY)) - double(rounded);
      const double err = std::fabs(double(y[i]) - want[i]) / ulp;
      if (err > worst) {
        worst = err;
        worst_at = x[i];
      }
      asymmetric += std::bit_cast<uint32_t>(yn[i]) != std::bit_cast<uint32_t>(-y[i]);
    }
    EXPECT_LE(worst, 1.5) << target << " at x = " << worst_at;
    EXPECT_EQ(asymmetric, 0) << target;
    std::printf("  %-8s float32 tanh max %.3f ulp over %zu values\n", target.c_str(), worst,
                x.size());
  });
}

TEST(SimdMath, Float32LengthsOffsetsAndInPlace) { check_lengths_and_offsets<float>(); }
TEST(SimdMath, Float64LengthsOffsetsAndInPlace) { check_lengths_and_offsets<double>(); }

// Public ops on a tensor large enough to be split across threads equal std:: elementwise.
TEST(SimdMath, PublicOpsMatchStd) {
  Generator gen(3);
  Tensor x32 = randn({256, 512}, DType::Float32, &gen) * 4.0;
  const std::vector<float> xv = x32.to_vector<float>();
  auto check32 = [&](const Tensor& y, Unary k) {
    const std::vector<float> yv = y.to_vector<float>();
    ASSERT_EQ(yv.size(), xv.size());
    int failures = 0;
    for (size_t i = 0; i < xv.size(); ++i) {
      std::string m = mismatch(k, xv[i], yv[i], reference<float, double>(k, xv[i]));
      if (!m.empty() && ++failures <= 5) ADD_FAILURE() << m;
    }
    EXPECT_EQ(failures, 0) << name(k);
  };
  check32(tanh(x32), Unary::Tanh);
  check32(sigmoid(x32), Unary::Sigmoid);
  check32(exp(x32), Unary::Exp);
  check32(gelu(x32), Unary::GeluErf);
  check32(silu(x32), Unary::Silu);

  Tensor x64 = randn({256, 512}, DType::Float64, &gen) * 4.0;
  const std::vector<double> dv = x64.to_vector<double>();
  const std::vector<double> tv = tanh(x64).to_vector<double>();
  const std::vector<double> gv = gelu(x64, GeluApproximation::Tanh).to_vector<double>();
  for (size_t i = 0; i < dv.size(); ++i) {
    ASSERT_EQ(
        mismatch(Unary::Tanh, dv[i], tv[i], reference<double, long double>(Unary::Tanh, dv[i])),
        "");
    ASSERT_EQ(mismatch(Unary::GeluTanh, dv[i], gv[i],
                       reference<double, long double>(Unary::GeluTanh, dv[i])),
              "");
  }
}

// The SIMD path (contiguous input) against the scalar reference lambdas (a transposed, strided
// input takes them) for every handled kind: both are within tolerance of the true value, so
// they agree within twice the ulps (plus the gelus' eps |x| term, from the scalar cancellation).
template <class T>
void check_simd_against_scalar_kernels() {
  Generator gen(5);
  const DType dtype = sizeof(T) == 4 ? DType::Float32 : DType::Float64;
  Tensor xt = (randn({300, 301}, dtype, &gen) * 6.0).t();
  ASSERT_FALSE(xt.is_contiguous());
  Tensor xc = xt.contiguous();
  const std::vector<T> xv = xc.template to_vector<T>();
  for (Unary k : kHandled) {
    const std::vector<T> scalar = kernels::unary(k, xt, kBeta, kThreshold).template to_vector<T>();
    const std::vector<T> simd = kernels::unary(k, xc, kBeta, kThreshold).template to_vector<T>();
    const Tolerance tol = tolerance(k);
    int failures = 0;
    for (size_t i = 0; i < xv.size(); ++i) {
      const bool nan = std::isnan(scalar[i]);
      bool ok = nan == std::isnan(simd[i]);
      if (ok && !nan) {
        ok = ulp_distance(scalar[i], simd[i]) <= 2 * tol.ulps + 1 ||
             (tol.eps_abs_x && std::fabs(static_cast<long double>(scalar[i]) - simd[i]) <=
                                   std::numeric_limits<T>::epsilon() * std::fabs(xv[i]));
      }
      if (!ok && ++failures <= 5)
        ADD_FAILURE() << name(k) << "(" << xv[i] << "): scalar " << scalar[i] << ", simd "
                      << simd[i];
    }
    EXPECT_EQ(failures, 0) << name(k);
  }
}

TEST(SimdMath, Float32AgreesWithScalarKernels) { check_simd_against_scalar_kernels<float>(); }
TEST(SimdMath, Float64AgreesWithScalarKernels) { check_simd_against_scalar_kernels<double>(); }

// simd_sum_widened: on every instruction set, the same bits as its documented order (element i
// into running sum i mod 16, then the sums added pairwise: 8 pairs, 4, 2, 1), for any length and
// start; within a double rounding per element of the long double sum; exact on integers.
template <class T>
void check_sum_widened() {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> exponent(-40, 40);  // so that float sums in double round
  std::vector<T> data(1100);
  for (T& v : data) v = T(std::ldexp(normal(rng), exponent(rng)));
  auto in_order = [](const T* x, int64_t n) {
    double sums[16] = {};
    for (int64_t i = 0; i < n; ++i) sums[i % 16] += x[i];
    for (int width = 8; width >= 1; width /= 2)
      for (int k = 0; k < width; ++k) sums[k] += sums[k + width];
    return sums[0];
  };
  for_each_target([&](const std::string&) {
    for (int64_t start : {0, 1, 3}) {
      for (int64_t n : {0, 1, 2, 3, 5, 8, 9, 12, 15, 16, 17, 31, 32, 33, 100, 1000, 1097}) {
        const T* x = data.data() + start;
        const double got = kernels::simd_sum_widened(x, n);
        EXPECT_EQ(got, in_order(x, n)) << "n " << n << " start " << start;
        EXPECT_EQ(kernels::sum_widened_scalar(x, n), got) << "scalar, n " << n;
        long double exact = 0, magnitude = 0;
        for (int64_t i = 0; i < n; ++i) exact += x[i], magnitude += std::fabs(x[i]);
        EXPECT_LE(std::fabs(got - exact), 1e-15L * magnitude * (n + 1)) << "n " << n;
      }
    }
    std::vector<T> integers(777);
    for (size_t i = 0; i < integers.size(); ++i) integers[i] = T(int(i % 13) - 6);
    double want = 0;
    for (T v : integers) want += v;
    EXPECT_EQ(kernels::simd_sum_widened(integers.data(), int64_t(integers.size())), want);
  });
}

TEST(SimdMath, Float32SumWidenedIsItsOrderOnEveryTarget) { check_sum_widened<float>(); }
TEST(SimdMath, Float64SumWidenedIsItsOrderOnEveryTarget) { check_sum_widened<double>(); }

}  // namespace
