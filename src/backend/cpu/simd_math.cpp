// Vectorised transcendental kernels for contiguous float32/float64 arrays: unary kinds, the gelu
// gradients (binary kinds) and the row pieces of softmax (max, shifted exp). Highway builds the
// HWY_NAMESPACE block once per x86 instruction set (SSSE3, SSE4, AVX2, AVX-512 and a one-lane
// fallback) and HWY_DYNAMIC_DISPATCH picks the best the CPU has. Highway's contrib math gives
// exp, expm1, log, log1p and tanh; erf is ours (ErfParts); sigmoid, silu, gelu and softplus are
// built from those.
#include "backend/cpu/simd_math.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "adjoint/error.h"
#include "core/cpu_features.h"

// The kinds that have a vectorised kernel of their own (simd_unary_fn, simd_binary_fn), once for
// every instruction set. PowScalar's kernel handles a = 2 and 3 only (simd_unary_handles).
// clang-format off
#ifndef ADJOINT_SIMD_KINDS
#define ADJOINT_SIMD_KINDS
#define ADJOINT_SIMD_UNARY_KINDS(X)                                                         \
  X(Neg) X(AddScalar) X(MulScalar) X(RSubScalar) X(RDivScalar) X(Square) X(PowScalar)     \
  X(Exp) X(Expm1) X(Log) X(Log1p) X(Sqrt) X(Rsqrt) X(Tanh) X(Erf) X(Sigmoid) X(Silu)      \
  X(GeluErf) X(GeluTanh) X(Softplus)
#define ADJOINT_SIMD_BINARY_KINDS(X)                                                        \
  X(Add) X(Sub) X(Mul) X(Div) X(Minimum) X(Maximum) X(TanhBackward) X(SigmoidBackward)    \
  X(ReluBackward) X(GeluTanhBackward) X(GeluErfBackward)
#endif
// clang-format on

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/simd_math.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target, each time followed by these:
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

// 0.5 x (1 + erf(x / sqrt 2)), with 1 + erf(-a) taken as erfc(a) so the negative tail keeps
// its relative precision (the scalar formula cancels there; both agree to about eps |x|).
template <class D>
HWY_INLINE Vec<D> GeluErfV(D d, Vec<D> x) {
  using T = hn::TFromD<D>;
  const Vec<D> one = hn::Set(d, T(1)), half = hn::Set(d, T(0.5));
  const Vec<D> a = hn::Abs(hn::Mul(x, hn::Set(d, T(M_SQRT1_2)))), x2 = hn::Mul(x, x);
  // (x / sqrt 2)^2 from x itself (halving is exact), not from the rounded a.
  Vec<D> erf, erfc;
  ErfParts(d, a, hn::Mul(half, x2), hn::Mul(half, hn::MulSub(x, x, x2)), erf, erfc);
  const Vec<D> one_plus_erf = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), erfc, hn::Add(one, erf));
  return hn::Mul(hn::Mul(half, x), one_plus_erf);  // NaN x gives NaN
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

// d/dx x Phi(x) = Phi(x) + x phi(x), with Phi from ErfParts as in GeluErfV.
template <class D>
HWY_INLINE Vec<D> GeluErfGradV(D d, Vec<D> x) {
  using T = hn::TFromD<D>;
  const Vec<D> one = hn::Set(d, T(1)), half = hn::Set(d, T(0.5));
  const Vec<D> a = hn::Abs(hn::Mul(x, hn::Set(d, T(M_SQRT1_2)))), x2 = hn::Mul(x, x);
  Vec<D> erf, erfc;
  ErfParts(d, a, hn::Mul(half, x2), hn::Mul(half, hn::MulSub(x, x, x2)), erf, erfc);
  const Vec<D> cdf = hn::Mul(half, hn::IfThenElse(hn::Lt(x, hn::Zero(d)), erfc, hn::Add(one, erf)));
  const Vec<D> pdf =
      hn::Mul(ExpV(d, hn::Mul(hn::Neg(half), x2)), hn::Set(d, T(0.3989422804014327)));
  return hn::MulAdd(x, pdf, cdf);  // NaN x gives NaN through pdf
}

// Writes f(in[i]) to out[i]; out may equal in. The last partial vector goes through a zeroed
// buffer, so no lane reads or writes past n and every lane computes on a valid number.
template <class D, class F>
HWY_INLINE void Apply(D d, const hn::TFromD<D>* in, hn::TFromD<D>* out, size_t n, F f) {
  using T = hn::TFromD<D>;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(f(hn::LoadU(d, in + i)), d, out + i);
  if (i == n) return;
  HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(T)] = {};
  std::memcpy(buf, in + i, (n - i) * sizeof(T));
  hn::Store(f(hn::Load(d, buf)), d, buf);
  std::memcpy(out + i, buf, (n - i) * sizeof(T));
}

// Writes f(a[i], b[i]) to out[i]; out may equal a or b. The tail goes through zeroed buffers.
template <class D, class F>
HWY_INLINE void Apply2(D d, const hn::TFromD<D>* a, const hn::TFromD<D>* b, hn::TFromD<D>* out,
                       size_t n, F f) {
  using T = hn::TFromD<D>;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(f(hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, out + i);
  if (i == n) return;
  HWY_ALIGN T bufa[HWY_MAX_BYTES / sizeof(T)] = {};
  HWY_ALIGN T bufb[HWY_MAX_BYTES / sizeof(T)] = {};
  std::memcpy(bufa, a + i, (n - i) * sizeof(T));
  std::memcpy(bufb, b + i, (n - i) * sizeof(T));
  hn::Store(f(hn::Load(d, bufa), hn::Load(d, bufb)), d, bufa);
  std::memcpy(out + i, bufa, (n - i) * sizeof(T));
}

template <class T>
HWY_INLINE void BinaryT(Binary kind, const T* a, const T* b, T* out, size_t n) {
  const hn::ScalableTag<T> d;
  using V = Vec<decltype(d)>;
  switch (kind) {
    // One correctly rounded operation each, so every instruction set gives the scalar result.
    case Binary::Add:
      return Apply2(d, a, b, out, n, [](V x, V y) HWY_ATTR { return hn::Add(x, y); });
    case Binary::Sub:
      return Apply2(d, a, b, out, n, [](V x, V y) HWY_ATTR { return hn::Sub(x, y); });
    case Binary::Mul:
      return Apply2(d, a, b, out, n, [](V x, V y) HWY_ATTR { return hn::Mul(x, y); });
    case Binary::Div:
      return Apply2(d, a, b, out, n, [](V x, V y) HWY_ATTR { return hn::Div(x, y); });
    // x where x < y or x is NaN, else y: the scalar loop's choice, signed zeros included.
    case Binary::Minimum:
      return Apply2(d, a, b, out, n, [](V x, V y) HWY_ATTR {
        return hn::IfThenElse(hn::Or(hn::Lt(x, y), hn::IsNaN(x)), x, y);
      });
    case Binary::Maximum:
      return Apply2(d, a, b, out, n, [](V x, V y) HWY_ATTR {
        return hn::IfThenElse(hn::Or(hn::Gt(x, y), hn::IsNaN(x)), x, y);
      });
    // The activation gradients in the scalar loop's order of operations: the same bits.
    case Binary::TanhBackward:
      return Apply2(d, a, b, out, n, [d](V g, V y) HWY_ATTR {
        return hn::Mul(g, hn::Sub(hn::Set(d, T(1)), hn::Mul(y, y)));
      });
    case Binary::SigmoidBackward:
      return Apply2(d, a, b, out, n, [d](V g, V y) HWY_ATTR {
        return hn::Mul(hn::Mul(g, y), hn::Sub(hn::Set(d, T(1)), y));
      });
    case Binary::ReluBackward:  // a NaN y passes g through
      return Apply2(d, a, b, out, n, [d](V g, V y) HWY_ATTR {
        return hn::IfThenZeroElse(hn::Le(y, hn::Zero(d)), g);
      });
    case Binary::GeluTanhBackward:
      return Apply2(d, a, b, out, n,
                    [d](V g, V x) HWY_ATTR { return hn::Mul(g, GeluTanhGradV(d, x)); });
    case Binary::GeluErfBackward:
      return Apply2(d, a, b, out, n,
                    [d](V g, V x) HWY_ATTR { return hn::Mul(g, GeluErfGradV(d, x)); });
    default:
      return;  // simd_binary_handles() keeps other kinds away
  }
}

// The largest of x[0, n), NaN if any is NaN, -inf when n == 0.
template <class T>
HWY_INLINE T MaxT(const T* x, size_t n) {
  const hn::ScalableTag<T> d;
  using V = Vec<decltype(d)>;
  const size_t lanes = hn::Lanes(d);
  V m = hn::Set(d, -std::numeric_limits<T>::infinity());
  V nan = hn::Zero(d);  // lanes that saw a NaN are all ones
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const V v = hn::LoadU(d, x + i);
    nan = hn::Or(nan, hn::VecFromMask(d, hn::IsNaN(v)));
    m = hn::Max(m, v);
  }
  T r = hn::GetLane(hn::MaxOfLanes(d, m));
  bool any_nan = !hn::AllFalse(d, hn::MaskFromVec(nan));
  for (; i < n; ++i) {
    any_nan |= x[i] != x[i];
    r = x[i] > r ? x[i] : r;
  }
  return any_nan ? std::numeric_limits<T>::quiet_NaN() : r;
}

void MaxF32(const float* x, size_t n, float* r) { *r = MaxT(x, n); }

// The sum of x[0, n) in double as 16 running sums, element i going to sum i mod 16, added in a
// fixed tree at the end: no add waits on the one before, and every instruction set (2, 4 or 8
// double lanes, or 1) adds the same values in the same order, so gives the same bits.
template <class T>
HWY_INLINE double SumWidenedT(const T* x, size_t n) {
  constexpr size_t kSums = 16;
  const hn::ScalableTag<double> dd;
  const hn::Rebind<T, decltype(dd)> dt;
  using V = Vec<decltype(dd)>;
  const size_t lanes = hn::Lanes(dd);
  const size_t vectors = kSums / lanes;
  V acc[kSums];
  for (size_t v = 0; v < vectors; ++v) acc[v] = hn::Zero(dd);
  size_t i = 0;
  for (; i + kSums <= n; i += kSums) {
    for (size_t v = 0; v < vectors; ++v) {
      if constexpr (std::is_same_v<T, double>) {
        acc[v] = hn::Add(acc[v], hn::LoadU(dd, x + i + v * lanes));
      } else {
        acc[v] = hn::Add(acc[v], hn::PromoteTo(dd, hn::LoadU(dt, x + i + v * lanes)));
      }
    }
  }
  HWY_ALIGN double sums[kSums];
  for (size_t v = 0; v < vectors; ++v) hn::Store(acc[v], dd, sums + v * lanes);
  for (; i < n; ++i) sums[i % kSums] += x[i];
  for (size_t width = kSums / 2; width >= 1; width /= 2)
    for (size_t k = 0; k < width; ++k) sums[k] += sums[k + width];
  return sums[0];
}

void SumWidenedF32(const float* x, size_t n, double* r) { *r = SumWidenedT(x, n); }
void SumWidenedF64(const double* x, size_t n, double* r) { *r = SumWidenedT(x, n); }
void MaxF64(const double* x, size_t n, double* r) { *r = MaxT(x, n); }

void ExpShiftedF32(const float* x, float shift, float* y, size_t n) {
  const hn::ScalableTag<float> d;
  const auto s = hn::Set(d, shift);
  Apply(d, x, y, n, [d, s](Vec<decltype(d)> v) HWY_ATTR { return ExpV(d, hn::Sub(v, s)); });
}
void ExpShiftedF64(const double* x, double shift, double* y, size_t n) {
  const hn::ScalableTag<double> d;
  const auto s = hn::Set(d, shift);
  Apply(d, x, y, n, [d, s](Vec<decltype(d)> v) HWY_ATTR { return ExpV(d, hn::Sub(v, s)); });
}

// One function per kind (BinaryT's switch folds away on the constant), for a caller that runs
// one kind over many blocks and calls it directly (simd_binary_fn).
template <class T, Binary K>
void BinaryOf(const T* a, const T* b, T* out, size_t n) {
  BinaryT<T>(K, a, b, out, n);
}
template <class T>
SimdBinaryFn<T> BinaryKernelT(Binary kind) {
  switch (kind) {
#define ADJOINT_CASE(k) \
  case Binary::k:       \
    return &BinaryOf<T, Binary::k>;
    ADJOINT_SIMD_BINARY_KINDS(ADJOINT_CASE)
#undef ADJOINT_CASE
    default:
      return nullptr;
  }
}
SimdBinaryFn<float> BinaryKernelF32(Binary kind) { return BinaryKernelT<float>(kind); }
SimdBinaryFn<double> BinaryKernelF64(Binary kind) { return BinaryKernelT<double>(kind); }
void BinaryF32(Binary kind, const float* a, const float* b, float* out, size_t n) {
  if (SimdBinaryFn<float> f = BinaryKernelT<float>(kind)) f(a, b, out, n);
}
void BinaryF64(Binary kind, const double* a, const double* b, double* out, size_t n) {
  if (SimdBinaryFn<double> f = BinaryKernelT<double>(kind)) f(a, b, out, n);
}

template <class T>
HWY_INLINE void UnaryT(Unary kind, const T* in, T* out, size_t n, T a, T b) {
  const hn::ScalableTag<T> d;
  using V = Vec<decltype(d)>;
  const V one = hn::Set(d, T(1));
  switch (kind) {
    // One correctly rounded operation each, as the scalar loop.
    case Unary::Neg:  // 0 - x, as the scalar loop (so -(+0) is +0 there too)
      return Apply(d, in, out, n, [d](V x) HWY_ATTR { return hn::Sub(hn::Zero(d), x); });
    case Unary::AddScalar: {
      const V s = hn::Set(d, a);
      return Apply(d, in, out, n, [s](V x) HWY_ATTR { return hn::Add(x, s); });
    }
    case Unary::MulScalar: {
      const V s = hn::Set(d, a);
      return Apply(d, in, out, n, [s](V x) HWY_ATTR { return hn::Mul(x, s); });
    }
    case Unary::RSubScalar: {
      const V s = hn::Set(d, a);
      return Apply(d, in, out, n, [s](V x) HWY_ATTR { return hn::Sub(s, x); });
    }
    case Unary::RDivScalar: {
      const V s = hn::Set(d, a);
      return Apply(d, in, out, n, [s](V x) HWY_ATTR { return hn::Div(s, x); });
    }
    case Unary::Square:
      return Apply(d, in, out, n, [](V x) HWY_ATTR { return hn::Mul(x, x); });
    case Unary::PowScalar:  // a is 2 or 3 (simd_unary_handles(kind, a)), as the scalar loop
      if (a == T(2)) return Apply(d, in, out, n, [](V x) HWY_ATTR { return hn::Mul(x, x); });
      return Apply(d, in, out, n, [](V x) HWY_ATTR { return hn::Mul(hn::Mul(x, x), x); });
    case Unary::Exp:
      return Apply(d, in, out, n, [d](V x) HWY_ATTR { return ExpV(d, x); });
    case Unary::Expm1:
      return Apply(d, in, out, n, [d](V x) HWY_ATTR { return Expm1V(d, x); });
    case Unary::Log:
      return Apply(d, in, out, n, [d](V x) HWY_ATTR { return LogV(d, x); });
    case Unary::Log1p:
      return Apply(d, in, out, n, [d](V x) HWY_ATTR { return Log1pV(d, x); });
    case Unary::Sqrt:
      return Apply(d, in, out, n, [](V x) HWY_ATTR { return hn::Sqrt(x); });
    case Unary::Rsqrt:  // 1 / sqrt(x) with both steps correctly rounded, as the scalar loop
      return Apply(d, in, out, n, [one](V x) HWY_ATTR { return hn::Div(one, hn::Sqrt(x)); });
    case Unary::Tanh:
      return Apply(d, in, out, n, [d](V x) HWY_ATTR { return TanhV(d, x); });
    case Unary::Erf:
      return Apply(d, in, out, n, [d](V x) HWY_ATTR { return ErfV(d, x); });
    case Unary::Sigmoid:
      return Apply(d, in, out, n, [d](V x) HWY_ATTR { return SigmoidV(d, x); });
    case Unary::Silu:
      return Apply(d, in, out, n, [d](V x) HWY_ATTR { return hn::Mul(x, SigmoidV(d, x)); });
    case Unary::GeluErf:
      return Apply(d, in, out, n, [d](V x) HWY_ATTR { return GeluErfV(d, x); });
    case Unary::GeluTanh:
      return Apply(d, in, out, n, [d](V x) HWY_ATTR { return GeluTanhV(d, x); });
    case Unary::Softplus: {
      // a = beta, b = threshold: x where beta x > threshold, else log1p(exp(beta x)) / beta.
      const V beta = hn::Set(d, a), threshold = hn::Set(d, b);
      return Apply(d, in, out, n, [d, beta, threshold](V x) HWY_ATTR {
        const V bx = hn::Mul(x, beta);
        const V soft = hn::Div(Log1pV(d, ExpV(d, bx)), beta);
        return hn::IfThenElse(hn::Gt(bx, threshold), x, soft);
      });
    }
    default:
      return;  // simd_unary_handles() keeps other kinds away
  }
}

// One function per kind, as BinaryOf (simd_unary_fn).
template <class T, Unary K>
void UnaryOf(const T* in, T* out, size_t n, T a, T b) {
  UnaryT<T>(K, in, out, n, a, b);
}
template <class T>
SimdUnaryFn<T> UnaryKernelT(Unary kind) {
  switch (kind) {
#define ADJOINT_CASE(k) \
  case Unary::k:        \
    return &UnaryOf<T, Unary::k>;
    ADJOINT_SIMD_UNARY_KINDS(ADJOINT_CASE)
#undef ADJOINT_CASE
    default:
      return nullptr;
  }
}
SimdUnaryFn<float> UnaryKernelF32(Unary kind) { return UnaryKernelT<float>(kind); }
SimdUnaryFn<double> UnaryKernelF64(Unary kind) { return UnaryKernelT<double>(kind); }
void UnaryF32(Unary kind, const float* in, float* out, size_t n, float a, float b) {
  if (SimdUnaryFn<float> f = UnaryKernelT<float>(kind)) f(in, out, n, a, b);
}
void UnaryF64(Unary kind, const double* in, double* out, size_t n, double a, double b) {
  if (SimdUnaryFn<double> f = UnaryKernelT<double>(kind)) f(in, out, n, a, b);
}
const char* ActiveTargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace adjoint::kernels::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace adjoint::kernels {
namespace simd {

// ADJOINT_MAX_CPU_ISA (Note [The ISA cap]): below AVX-512, Highway's AVX-512 targets (every
// x86 target better than AVX2 has a lower bit) are disabled before the first dispatch. A
// static initializer, so the per-call dispatch pays nothing for it.
const bool isa_cap_applied = [] {
  const adjoint::detail::CpuFeatures& cpu = adjoint::detail::cpu_features();
  if (!cpu.avx2) return hwy::DisableTargets(HWY_SSE4 - 1), true;
  if (!cpu.avx512) hwy::DisableTargets(HWY_AVX2 - 1);
  return true;
}();

// The dispatch tables must live in the namespace that holds the per-target namespaces.
HWY_EXPORT(UnaryF32);
HWY_EXPORT(UnaryF64);
HWY_EXPORT(UnaryKernelF32);
HWY_EXPORT(UnaryKernelF64);
HWY_EXPORT(BinaryKernelF32);
HWY_EXPORT(BinaryKernelF64);
HWY_EXPORT(ActiveTargetName);
HWY_EXPORT(BinaryF32);
HWY_EXPORT(BinaryF64);
HWY_EXPORT(MaxF32);
HWY_EXPORT(MaxF64);
HWY_EXPORT(SumWidenedF32);
HWY_EXPORT(SumWidenedF64);
HWY_EXPORT(ExpShiftedF32);
HWY_EXPORT(ExpShiftedF64);

void unary_f32(Unary kind, const float* in, float* out, size_t n, float a, float b) {
  HWY_DYNAMIC_DISPATCH(UnaryF32)(kind, in, out, n, a, b);
}
void unary_f64(Unary kind, const double* in, double* out, size_t n, double a, double b) {
  HWY_DYNAMIC_DISPATCH(UnaryF64)(kind, in, out, n, a, b);
}
const char* active_target_name() { return HWY_DYNAMIC_DISPATCH(ActiveTargetName)(); }
void binary_f32(Binary kind, const float* a, const float* b, float* out, size_t n) {
  HWY_DYNAMIC_DISPATCH(BinaryF32)(kind, a, b, out, n);
}
void binary_f64(Binary kind, const double* a, const double* b, double* out, size_t n) {
  HWY_DYNAMIC_DISPATCH(BinaryF64)(kind, a, b, out, n);
}
void max_f32(const float* x, size_t n, float* r) { HWY_DYNAMIC_DISPATCH(MaxF32)(x, n, r); }
void max_f64(const double* x, size_t n, double* r) { HWY_DYNAMIC_DISPATCH(MaxF64)(x, n, r); }
void sum_widened_f32(const float* x, size_t n, double* r) {
  HWY_DYNAMIC_DISPATCH(SumWidenedF32)(x, n, r);
}
void sum_widened_f64(const double* x, size_t n, double* r) {
  HWY_DYNAMIC_DISPATCH(SumWidenedF64)(x, n, r);
}
void exp_shifted_f32(const float* x, float shift, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(ExpShiftedF32)(x, shift, y, n);
}
void exp_shifted_f64(const double* x, double shift, double* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(ExpShiftedF64)(x, shift, y, n);
}
SimdUnaryFn<float> unary_kernel_f32(Unary kind) {
  return HWY_DYNAMIC_DISPATCH(UnaryKernelF32)(kind);
}
SimdUnaryFn<double> unary_kernel_f64(Unary kind) {
  return HWY_DYNAMIC_DISPATCH(UnaryKernelF64)(kind);
}
SimdBinaryFn<float> binary_kernel_f32(Binary kind) {
  return HWY_DYNAMIC_DISPATCH(BinaryKernelF32)(kind);
}
SimdBinaryFn<double> binary_kernel_f64(Binary kind) {
  return HWY_DYNAMIC_DISPATCH(BinaryKernelF64)(kind);
}

}  // namespace simd

bool simd_binary_handles(Binary kind) {
  switch (kind) {
    case Binary::Add:
    case Binary::Sub:
    case Binary::Mul:
    case Binary::Div:
    case Binary::Minimum:
    case Binary::Maximum:
    case Binary::TanhBackward:
    case Binary::SigmoidBackward:
    case Binary::ReluBackward:
    case Binary::GeluTanhBackward:
    case Binary::GeluErfBackward:
      return true;
    default:
      return false;
  }
}

template <>
SimdUnaryFn<float> simd_unary_fn<float>(Unary kind, double a) {
  return simd_unary_handles(kind, a) ? simd::unary_kernel_f32(kind) : nullptr;
}
template <>
SimdUnaryFn<double> simd_unary_fn<double>(Unary kind, double a) {
  return simd_unary_handles(kind, a) ? simd::unary_kernel_f64(kind) : nullptr;
}
template <>
SimdBinaryFn<float> simd_binary_fn<float>(Binary kind) {
  return simd_binary_handles(kind) ? simd::binary_kernel_f32(kind) : nullptr;
}
template <>
SimdBinaryFn<double> simd_binary_fn<double>(Binary kind) {
  return simd_binary_handles(kind) ? simd::binary_kernel_f64(kind) : nullptr;
}

bool simd_binary(Binary kind, const float* a, const float* b, float* out, int64_t n) {
  if (!simd_binary_handles(kind)) return false;
  if (n > 0) simd::binary_f32(kind, a, b, out, static_cast<size_t>(n));
  return true;
}

bool simd_binary(Binary kind, const double* a, const double* b, double* out, int64_t n) {
  if (!simd_binary_handles(kind)) return false;
  if (n > 0) simd::binary_f64(kind, a, b, out, static_cast<size_t>(n));
  return true;
}

float simd_max(const float* x, int64_t n) {
  float r;
  simd::max_f32(x, static_cast<size_t>(std::max<int64_t>(n, 0)), &r);
  return r;
}

double simd_max(const double* x, int64_t n) {
  double r;
  simd::max_f64(x, static_cast<size_t>(std::max<int64_t>(n, 0)), &r);
  return r;
}

double simd_sum_widened(const float* x, int64_t n) {
  double r;
  simd::sum_widened_f32(x, static_cast<size_t>(std::max<int64_t>(n, 0)), &r);
  return r;
}

double simd_sum_widened(const double* x, int64_t n) {
  double r;
  simd::sum_widened_f64(x, static_cast<size_t>(std::max<int64_t>(n, 0)), &r);
  return r;
}

void simd_exp_shifted(const float* x, float shift, float* y, int64_t n) {
  if (n > 0) simd::exp_shifted_f32(x, shift, y, static_cast<size_t>(n));
}

void simd_exp_shifted(const double* x, double shift, double* y, int64_t n) {
  if (n > 0) simd::exp_shifted_f64(x, shift, y, static_cast<size_t>(n));
}

bool simd_unary_handles(Unary kind) {
  switch (kind) {
    case Unary::Neg:
    case Unary::AddScalar:
    case Unary::MulScalar:
    case Unary::RSubScalar:
    case Unary::RDivScalar:
    case Unary::Square:
    case Unary::Exp:
    case Unary::Expm1:
    case Unary::Log:
    case Unary::Log1p:
    case Unary::Sqrt:
    case Unary::Rsqrt:
    case Unary::Tanh:
    case Unary::Erf:
    case Unary::Sigmoid:
    case Unary::Silu:
    case Unary::GeluErf:
    case Unary::GeluTanh:
    case Unary::Softplus:
      return true;
    default:
      return false;
  }
}

bool simd_is_exact(Unary kind) {
  switch (kind) {
    case Unary::Neg:
    case Unary::AddScalar:
    case Unary::MulScalar:
    case Unary::RSubScalar:
    case Unary::RDivScalar:
    case Unary::Square:
    case Unary::PowScalar:  // x^2 and x^3, the only ones it computes
      return true;
    default:
      return false;
  }
}

bool simd_is_exact(Binary kind) {
  return simd_binary_handles(kind) && kind != Binary::GeluTanhBackward &&
         kind != Binary::GeluErfBackward;
}

bool simd_unary_handles(Unary kind, double a) {
  if (kind == Unary::PowScalar) return a == 2 || a == 3;
  return simd_unary_handles(kind);
}

bool simd_unary(Unary kind, const float* in, float* out, int64_t n, double a, double b) {
  if (!simd_unary_handles(kind, a)) return false;
  // Parameters are rounded to the element type first, as the scalar kernels do.
  if (n > 0)
    simd::unary_f32(kind, in, out, static_cast<size_t>(n), static_cast<float>(a),
                    static_cast<float>(b));
  return true;
}

bool simd_unary(Unary kind, const double* in, double* out, int64_t n, double a, double b) {
  if (!simd_unary_handles(kind, a)) return false;
  if (n > 0) simd::unary_f64(kind, in, out, static_cast<size_t>(n), a, b);
  return true;
}

std::vector<std::string> simd_targets() {
  std::vector<std::string> names;
  for (int64_t t : hwy::SupportedAndGeneratedTargets()) names.emplace_back(hwy::TargetName(t));
  return names;
}

namespace {
std::atomic<int> target_generation{0};
}  // namespace

int simd_target_generation() { return target_generation.load(std::memory_order_acquire); }

void simd_pin_target_for_test(int index) {
  hwy::SetSupportedTargetsForTest(0);  // un-pin first, so the list below is the full one
  if (index >= 0) {
    std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
    ADJOINT_ASSERT(static_cast<size_t>(index) < targets.size(), "no SIMD target ", index);
    hwy::SetSupportedTargetsForTest(targets[static_cast<size_t>(index)]);
  }
  target_generation.fetch_add(1, std::memory_order_acq_rel);
}

std::string simd_active_target() { return simd::active_target_name(); }

}  // namespace adjoint::kernels
#endif  // HWY_ONCE

// The erf coefficients above came from a long double program (glibc erfl/erfcl as truth) that:
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
