// The per-element vector functions of simd_math.cpp: exp, expm1, log and log1p around
// Highway's contrib math (whose edge cases they fix), and our own float32 tanh, erf, sigmoid,
// the gelus and their gradients. Highway's exp, expm1, log, log1p and float64 tanh are used as
// they are; erf (ErfParts) and float32 tanh (TanhF32) are ours; sigmoid, silu, gelu and
// softplus are built from those. Included by simd_math.cpp once per instruction set
// (foreach_target), so it has Highway's per-target include guard instead of #pragma once.
#if defined(ADJOINT_BACKEND_CPU_SIMD_MATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ADJOINT_BACKEND_CPU_SIMD_MATH_INL_H_
#undef ADJOINT_BACKEND_CPU_SIMD_MATH_INL_H_
#else
#define ADJOINT_BACKEND_CPU_SIMD_MATH_INL_H_
#endif

#include <cmath>
#include <cstddef>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace adjoint::kernels::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D>
using Vec = hn::Vec<D>;

template <class T>
struct Limits;
template <>
struct Limits<float> {
  // Highway's exp/expm1 are only valid on [-104, 104] (float32; past that the float->int step
  // overflows). exp already gives inf above 88.8 and 0 below -103.98, so clamping the input
  // to the range changes no result.
  static constexpr float kExpMin = -104, kExpMax = 104;
  // erf(x) rounds to 1 for x >= 3.92.
  static constexpr float kErfMax = 4;
};
template <>
struct Limits<double> {
  // Highway documents [-1000, 706] for float64; exp's reconstruction (two factors 2^(q/2)) stays
  // in range up to 1000, where the result is long since inf.
  static constexpr double kExpMin = -1000, kExpMax = 1000;
  // erf(x) rounds to 1 for x >= 5.92.
  static constexpr double kErfMax = 6;
};

// Highway's math assumes non-NaN inputs (a NaN would go through a float->int conversion), so
// callers compute on ZeroNaN(x) and put the NaN back with KeepNaN.
template <class D>
HWY_INLINE Vec<D> ZeroNaN(Vec<D> x) {
  return hn::IfThenZeroElse(hn::IsNaN(x), x);
}
template <class D>
HWY_INLINE Vec<D> KeepNaN(Vec<D> x, Vec<D> r) {
  return hn::IfThenElse(hn::IsNaN(x), x, r);
}

// c[0] + c[1] v + ... + c[N-1] v^(N-1).
template <class D, size_t N>
HWY_INLINE Vec<D> Horner(D d, Vec<D> v, const hn::TFromD<D> (&c)[N]) {
  Vec<D> r = hn::Set(d, c[N - 1]);
  for (size_t i = N - 1; i-- > 0;) r = hn::MulAdd(r, v, hn::Set(d, c[i]));
  return r;
}
// Horner with per-lane coefficients: b where `use_b`, else a (a's missing top terms are 0).
template <class D, size_t NA, size_t NB>
HWY_INLINE Vec<D> Horner2(D d, hn::Mask<D> use_b, Vec<D> v, const hn::TFromD<D> (&a)[NA],
                          const hn::TFromD<D> (&b)[NB]) {
  static_assert(NA <= NB);
  auto coef = [&](size_t i) HWY_ATTR {
    return i < NA ? hn::IfThenElse(use_b, hn::Set(d, b[i]), hn::Set(d, a[i]))
                  : hn::IfThenElseZero(use_b, hn::Set(d, b[i]));
  };
  Vec<D> r = coef(NB - 1);
  for (size_t i = NB - 1; i-- > 0;) r = hn::MulAdd(r, v, coef(i));
  return r;
}

template <class D>
HWY_INLINE Vec<D> ExpV(D d, Vec<D> x) {
  using L = Limits<hn::TFromD<D>>;
  const Vec<D> xc = hn::Min(hn::Max(ZeroNaN<D>(x), hn::Set(d, L::kExpMin)), hn::Set(d, L::kExpMax));
  return KeepNaN<D>(x, hn::Exp(d, xc));
}

template <class D>
HWY_INLINE Vec<D> Expm1V(D d, Vec<D> x) {
  using L = Limits<hn::TFromD<D>>;
  const Vec<D> xc = hn::Min(hn::Max(ZeroNaN<D>(x), hn::Set(d, L::kExpMin)), hn::Set(d, L::kExpMax));
  const Vec<D> r = hn::Expm1(d, xc);
  // Highway gives +0 for -0; expm1 keeps the sign of zero.
  return KeepNaN<D>(x, hn::IfThenElse(hn::Eq(x, hn::Zero(d)), x, r));
}

// Highway's log and log1p assume an argument in their domain; give IEEE's answers elsewhere.
template <class D>
HWY_INLINE Vec<D> LogV(D d, Vec<D> x) {
  const Vec<D> zero = hn::Zero(d), inf = hn::Inf(d);
  Vec<D> r = hn::Log(d, x);
  r = hn::IfThenElse(hn::Eq(x, zero), hn::Neg(inf), r);
  r = hn::IfThenElse(hn::Eq(x, inf), inf, r);
  r = hn::IfThenElse(hn::Lt(x, zero), hn::NaN(d), r);
  return KeepNaN<D>(x, r);
}

template <class D>
HWY_INLINE Vec<D> Log1pV(D d, Vec<D> x) {
  using T = hn::TFromD<D>;
  const Vec<D> minus_one = hn::Set(d, T(-1)), inf = hn::Inf(d);
  Vec<D> r = hn::Log1p(d, x);
  r = hn::IfThenElse(hn::Eq(x, minus_one), hn::Neg(inf), r);
  r = hn::IfThenElse(hn::Eq(x, inf), inf, r);  // Highway computes inf * (x / inf) = NaN
  r = hn::IfThenElse(hn::Lt(x, minus_one), hn::NaN(d), r);
  return KeepNaN<D>(x, r);
}

// Coefficients of the float32 tanh (TanhF32), from scripts/fit_tanh_f32.py. Below
// 0.625, tanh(a) = a + a s P(s) with s = a^2 (relative minimax of tanh(a) / a on [0, 0.625],
// 0.07 ulp before rounding to float); exp(r) on [-ln 2 / 2, ln 2 / 2] (relative minimax, 0.03
// ulp).
struct TanhF32Coefs {
  static constexpr float kSmall[5] = {-3.333328197e-01f, 1.333144293e-01f, -5.373977499e-02f,
                                      2.063927894e-02f, -5.705196626e-03f};
  static constexpr float kExp[7] = {1.0f,
                                    1.000000032e+00f,
                                    4.999999421e-01f,
                                    1.666643125e-01f,
                                    4.166800212e-02f,
                                    8.374155954e-03f,
                                    1.384365102e-03f};
};

// tanh for float32 in about two thirds of the operations of Highway's (expm1, a division, and our
// range and NaN guards around it: 11.1 ns per 16 floats on Zen 4 AVX-512, against 6.8 here) and
// more exactly: 1.48 ulp at most over every float32 on every target (Highway's: 2). With a = |x|:
//   a < 0.625:  a + a s P(s), s = a^2. The leading a is exact and the correction at most 12% of
//               the result, so the polynomial's roundings count for little.
//   a >= 0.625: 1 - 2E / (1 + E) with E = exp(-2a) in (0, 0.29]: the quotient is at most 0.47 of
//               the result and the errors of E reach it damped (by 0.75 at a = 0.625, fast
//               decreasing). E = 2^k exp(r), r = -2a - k ln 2 (Cody and Waite: k ln2_hi is
//               exact), the power of two added to E's exponent; a is clamped to 10 (k >= -29),
//               where the result has long been 1.
// NaN takes the first branch (a >= 0.625 is false) and stays NaN; the sign is copied back last,
// so tanh(-0) = -0.
template <class D>
HWY_INLINE Vec<D> TanhF32(D d, Vec<D> x) {
  using C = TanhF32Coefs;
  const hn::RebindToSigned<D> di;
  const Vec<D> a = hn::Abs(x), s = hn::Mul(a, a), one = hn::Set(d, 1.0f);
  const Vec<D> small = hn::MulAdd(hn::Mul(a, s), Horner(d, s, C::kSmall), a);

  const Vec<D> ac = hn::Min(a, hn::Set(d, 10.0f));
  const Vec<D> k = hn::Round(hn::Mul(ac, hn::Set(d, -2.88539008177792681f)));  // -2 log2(e)
  Vec<D> r = hn::MulAdd(k, hn::Set(d, -0.693145751953125f), hn::Mul(ac, hn::Set(d, -2.0f)));
  r = hn::MulAdd(k, hn::Set(d, -1.428606765330187045e-6f), r);
  const auto scale = hn::ShiftLeft<23>(hn::ConvertTo(di, k));
  const Vec<D> e = hn::BitCast(d, hn::Add(hn::BitCast(di, Horner(d, r, C::kExp)), scale));
  const Vec<D> large = hn::Sub(one, hn::Div(hn::Add(e, e), hn::Add(one, e)));

  const Vec<D> t = hn::IfThenElse(hn::Ge(a, hn::Set(d, 0.625f)), large, small);
  return hn::CopySignToAbs(t, x);
}

template <class D>
HWY_INLINE Vec<D> TanhV(D d, Vec<D> x) {
  using T = hn::TFromD<D>;
  if constexpr (sizeof(T) == 4) {
    return TanhF32(d, x);
  } else {
    // tanh(x) rounds to +-1 past 18.7; the clamp keeps expm1 in range.
    const Vec<D> xc = hn::Min(hn::Max(ZeroNaN<D>(x), hn::Set(d, T(-20))), hn::Set(d, T(20)));
    return KeepNaN<D>(x, hn::Tanh(d, xc));
  }
}

// 1 / (1 + exp(-x)) for x >= 0 and exp(x) / (1 + exp(x)) below, as the scalar sigmoid_of: the
// exponent is never positive, so nothing overflows and small results keep their precision.
template <class D>
HWY_INLINE Vec<D> SigmoidV(D d, Vec<D> x) {
  using T = hn::TFromD<D>;
  const Vec<D> one = hn::Set(d, T(1));
  const Vec<D> e = ExpV(d, hn::Neg(hn::Abs(x)));
  const Vec<D> num = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), e, one);
  return hn::Div(num, hn::Add(one, e));
}

// Coefficients of our erf (Highway 1.0.3 has none), fitted for this file: truncated Chebyshev
// interpolants converted to monomials and rounded to T (generator sketched at the end of this
// file). Below 1, erf(a) = a + a R(a^2) with R(t) = erf(sqrt t) / sqrt t - 1; from 1,
// erfc(a) = exp(-a^2) Q(v), Q = erfc(a) exp(a^2) with v = (a - c) / h mapping each piece
// [c - h, c + h] onto [-1, 1]. Q is smooth and slowly varying, so low degrees suffice and no
// division is needed. Measured (2e6 points on [0, kErfMax], and tests/backend/simd_math_test):
// float32 erf <= 1.04 ulp, erfc from 1 relative error <= 3e-7; float64 erf <= 1.06 ulp, erfc
// relative error <= 7e-16.
template <class T>
struct ErfCoefs;
template <>
struct ErfCoefs<float> {
  static constexpr float kSmall[7] = {1.283791661e-01f,  -3.761262596e-01f, 1.128359735e-01f,
                                      -2.685432881e-02f, 5.189312156e-03f,  -8.018855006e-04f,
                                      7.882497448e-05f};
  // One piece: [1, 4], c = 2.5, h = 1.5.
  static constexpr float kTail[12] = {2.108063549e-01f,  -1.115210056e-01f, 5.611095950e-02f,
                                      -2.700572461e-02f, 1.248403545e-02f,  -5.567332730e-03f,
                                      2.425885061e-03f,  -1.017117756e-03f, 3.678686626e-04f,
                                      -1.439485932e-04f, 9.640451754e-05f,  -3.692872269e-05f};
};
template <>
struct ErfCoefs<double> {
  static constexpr double kSmall[13] = {
      1.28379167095512586e-01,  -3.76126389031837483e-01, 1.12837916709547834e-01,
      -2.68661706450630221e-02, 5.22397762471486435e-03,  -8.54832697636241450e-04,
      1.20553309943617168e-04,  -1.49255934156489189e-05, 1.64609844925204629e-06,
      -1.63502714774684448e-07, 1.46602587847155519e-08,  -1.13773050240221595e-09,
      5.96855898038484156e-11};
  // Two pieces, chosen per lane: [1, 2.5] (c = 1.75, h = 0.75, degree 17) and [2.5, 6]
  // (c = 4.25, h = 1.75, degree 20).
  static constexpr double kTailLo[18] = {
      2.84972234737436381e-01,  -9.82322591358639335e-02, 3.13670419239844983e-02,
      -9.39093549245930727e-03, 2.65917912424953841e-03,  -7.16891445625974914e-04,
      1.84956077766241183e-04,  -4.58561670481165193e-05, 1.09628965555090084e-05,
      -2.53451107744418142e-06, 5.68008221498693898e-07,  -1.23659801896588983e-07,
      2.62146021024848678e-08,  -5.41415045203959713e-09, 1.07710801389160338e-09,
      -2.12112864309924960e-10, 4.85514776530730290e-11,  -9.19172145804244240e-12};
  static constexpr double kTailHi[21] = {
      1.29345274785987924e-01,  -5.06525799755765116e-02, 1.93913404637347624e-02,
      -7.26695431747191416e-03, 2.66900371710423589e-03,  -9.61732980049935277e-04,
      3.40311613238439942e-04,  -1.18354184097080014e-04, 4.04862799076015305e-05,
      -1.36317480393437791e-05, 4.52056774863677721e-06,  -1.47744954532893114e-06,
      4.76099554174343632e-07,  -1.51163046317505850e-07, 4.74179443511283731e-08,
      -1.49303890177125246e-08, 4.57650514706919864e-09,  -1.19269168615450850e-09,
      3.53091630008369352e-10,  -1.89395462276327947e-10, 5.60240742686346493e-11};
};

// erf(a) and erfc(a) = 1 - erf(a) for a >= 0 (a NaN gives NaN or garbage: callers handle NaN).
// Both are needed: gelu(x) for x < 0 uses erfc(|x|/sqrt 2), where 1 + erf would cancel. The
// caller passes a^2 as sq + sq_err (sq_err is 0 on targets without FMA): exp(-a^2) is the
// sensitive part, and gelu knows a^2 = x^2 / 2 better than the square of the rounded a.
template <class D>
HWY_INLINE void ErfParts(D d, Vec<D> a, Vec<D> sq, Vec<D> sq_err, Vec<D>& erf, Vec<D>& erfc) {
  using T = hn::TFromD<D>;
  using C = ErfCoefs<T>;
  const Vec<D> one = hn::Set(d, T(1)), erf_max = hn::Set(d, Limits<T>::kErfMax);
  const auto small = hn::Lt(a, one);
  // Below 1 the leading term a is exact, so the result is within about half an ulp.
  const Vec<D> es = hn::MulAdd(a, Horner(d, hn::Mul(a, a), C::kSmall), a);

  const Vec<D> at = hn::Min(hn::Max(a, one), erf_max);  // keeps every lane in the fitted range
  Vec<D> q;
  if constexpr (sizeof(T) == 4) {
    q = Horner(d, hn::Mul(hn::Sub(at, hn::Set(d, T(2.5))), hn::Set(d, T(1 / 1.5))), C::kTail);
  } else {
    const auto hi = hn::Ge(at, hn::Set(d, T(2.5)));
    const Vec<D> c = hn::IfThenElse(hi, hn::Set(d, T(4.25)), hn::Set(d, T(1.75)));
    const Vec<D> inv_h = hn::IfThenElse(hi, hn::Set(d, T(1 / 1.75)), hn::Set(d, T(1 / 0.75)));
    q = Horner2(d, hi, hn::Mul(hn::Sub(at, c), inv_h), C::kTailLo, C::kTailHi);
  }
  // exp(-(sq + sq_err)) = exp(-sq) (1 - sq_err) to well below an ulp. Only lanes with a in
  // [1, kErfMax) use it, and there at == a.
  Vec<D> e = ExpV(d, hn::Neg(sq));
  e = hn::NegMulAdd(e, sq_err, e);
  const Vec<D> et = hn::IfThenZeroElse(hn::Ge(a, erf_max), hn::Mul(e, q));
  erf = hn::IfThenElse(small, es, hn::Sub(one, et));
  erfc = hn::IfThenElse(small, hn::Sub(one, es), et);
}

template <class D>
HWY_INLINE Vec<D> ErfV(D d, Vec<D> x) {
  const Vec<D> a = hn::Abs(x), sq = hn::Mul(a, a);
  Vec<D> erf, erfc;
  ErfParts(d, a, sq, hn::MulSub(a, a, sq), erf, erfc);
  return KeepNaN<D>(x, hn::CopySignToAbs(erf, x));
}

// 1 + erf(x / sqrt 2) (x2 = x x), with 1 + erf(-a) taken as erfc(a) so the negative tail keeps
// its relative precision (the scalar formula cancels there; both agree to about eps |x|): the
// normal CDF doubled, for the erf gelu and its gradient.
template <class D>
HWY_INLINE Vec<D> OnePlusErfOverRoot2V(D d, Vec<D> x, Vec<D> x2) {
  using T = hn::TFromD<D>;
  const Vec<D> one = hn::Set(d, T(1)), half = hn::Set(d, T(0.5));
  const Vec<D> a = hn::Abs(hn::Mul(x, hn::Set(d, T(M_SQRT1_2))));
  // (x / sqrt 2)^2 from x itself (halving is exact), not from the rounded a.
  Vec<D> erf, erfc;
  ErfParts(d, a, hn::Mul(half, x2), hn::Mul(half, hn::MulSub(x, x, x2)), erf, erfc);
  return hn::IfThenElse(hn::Lt(x, hn::Zero(d)), erfc, hn::Add(one, erf));
}

// 0.5 x (1 + erf(x / sqrt 2)).
template <class D>
HWY_INLINE Vec<D> GeluErfV(D d, Vec<D> x) {
  using T = hn::TFromD<D>;
  const Vec<D> half = hn::Set(d, T(0.5));
  return hn::Mul(hn::Mul(half, x), OnePlusErfOverRoot2V(d, x, hn::Mul(x, x)));  // NaN x gives NaN
}

// 0.5 x (1 + tanh u) with u = sqrt(2/pi) (x + 0.044715 x^3), computed as x sigmoid(2u): the same
// function, one exp instead of expm1, and no cancellation in 1 + tanh u for negative x.
template <class D>
HWY_INLINE Vec<D> GeluTanhV(D d, Vec<D> x) {
  using T = hn::TFromD<D>;
  constexpr double k2 = 2 * 0.7978845608028654;  // 2 sqrt(2 / pi)
  const Vec<D> two_u =
      hn::Mul(x, hn::MulAdd(hn::Mul(x, x), hn::Set(d, T(k2 * 0.044715)), hn::Set(d, T(k2))));
  return hn::Mul(x, SigmoidV(d, two_u));
}

// d/dx gelu_tanh(x) = s (1 + x (1 - s) v') with v = 2u = x (k2 + k2 c x^2), s = sigmoid(v) and
// v' = k2 (1 + 3 c x^2) (the tanh form's 0.5 (1 + tanh u) is sigmoid(2u), 1 - tanh^2 u is
// 4 s (1 - s)). s and 1 - s come from the same exp(-|v|), so 1 - s keeps its precision.
template <class D>
HWY_INLINE Vec<D> GeluTanhGradV(D d, Vec<D> x) {
  using T = hn::TFromD<D>;
  constexpr double k2 = 2 * 0.7978845608028654, c = 0.044715;
  const Vec<D> one = hn::Set(d, T(1));
  const Vec<D> x2 = hn::Mul(x, x);
  const Vec<D> v = hn::Mul(x, hn::MulAdd(x2, hn::Set(d, T(k2 * c)), hn::Set(d, T(k2))));
  const Vec<D> dv = hn::MulAdd(x2, hn::Set(d, T(3 * k2 * c)), hn::Set(d, T(k2)));
  const Vec<D> e = ExpV(d, hn::Neg(hn::Abs(v)));
  const Vec<D> inv = hn::Div(one, hn::Add(one, e));
  const auto neg = hn::Lt(v, hn::Zero(d));
  const Vec<D> s = hn::Mul(hn::IfThenElse(neg, e, one), inv);
  const Vec<D> sc = hn::Mul(hn::IfThenElse(neg, one, e), inv);  // 1 - s
  return hn::Mul(s, hn::MulAdd(hn::Mul(x, sc), dv, one));
}

// d/dx x Phi(x) = Phi(x) + x phi(x), with Phi as in GeluErfV.
template <class D>
HWY_INLINE Vec<D> GeluErfGradV(D d, Vec<D> x) {
  using T = hn::TFromD<D>;
  const Vec<D> half = hn::Set(d, T(0.5)), x2 = hn::Mul(x, x);
  const Vec<D> cdf = hn::Mul(half, OnePlusErfOverRoot2V(d, x, x2));
  const Vec<D> pdf =
      hn::Mul(ExpV(d, hn::Mul(hn::Neg(half), x2)), hn::Set(d, T(0.3989422804014327)));
  return hn::MulAdd(x, pdf, cdf);  // NaN x gives NaN through pdf
}

}  // namespace HWY_NAMESPACE
}  // namespace adjoint::kernels::simd
HWY_AFTER_NAMESPACE();

#endif  // ADJOINT_BACKEND_CPU_SIMD_MATH_INL_H_

// The erf coefficients (ErfCoefs) came from a long double program (glibc erfl/erfcl as truth) that:
//   // Chebyshev coefficients of g on [-1, 1] from n = 96 nodes, truncated at degree d:
//   for k in 0..d: c[k] = 2/n * sum_j g(cos(pi (j + 0.5) / n)) cos(k pi (j + 0.5) / n); c[0] /= 2
//   // to monomials via T_0 = 1, T_1 = v, T_k = 2 v T_(k-1) - T_(k-2); then round to T.
//   small: g(v) = erf(sqrt t) / sqrt t with t = (v + 1) / 2, re-expanded in t, minus 1 in c[0];
//          d = 6 (float32), 12 (float64)
//   tail:  g(v) = erfc(x) exp(x^2) with x = c + h v; float32 [1, 4] d = 11;
//          float64 [1, 2.5] d = 17 and [2.5, 6] d = 20
// then checked by evaluating exactly as ErfParts does, in T with FMA, against erfl/erfcl.
//
// The float32 tanh's coefficients (TanhF32Coefs) come from scripts/fit_tanh_f32.py (relative
// minimax by Lawson's iteration in mpmath), and the kernel was checked by running it on every
// float32 (2^31 patterns, the sign symmetric) on each target against double tanh: at most 1.457
// ulp (AVX2, AVX-512) and 1.480 (SSE4, SSSE3, SCALAR: no FMA); 69,493 (75,710) values above 1
// ulp. A rational tanh (a P(s) / Q(s), degrees 4 and 4) was faster still but reached 5.1 ulp:
// the roundings of P and Q are not damped near 1.
