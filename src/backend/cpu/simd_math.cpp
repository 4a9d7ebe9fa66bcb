// Vectorised transcendental kernels for contiguous float32/float64 arrays: unary kinds, the gelu
// gradients (binary kinds) and the row pieces of softmax (max, shifted exp). Highway builds the
// HWY_NAMESPACE block once per x86 instruction set (SSSE3, SSE4, AVX2, AVX-512 and a one-lane
// fallback) and HWY_DYNAMIC_DISPATCH picks the best the CPU has. The per-element vector
// functions they apply are in simd_math-inl.h; this file has the loops over arrays, the kernel
// tables and the dispatch.
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
  X(Relu) X(Exp) X(Expm1) X(Log) X(Log1p) X(Sqrt) X(Rsqrt) X(Tanh) X(Erf) X(Sigmoid)      \
  X(Silu) X(GeluErf) X(GeluTanh) X(Softplus)
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
// The vector math functions (exp, tanh, erf, sigmoid, the gelus and their gradients).
#include "backend/cpu/simd_math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace adjoint::kernels::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// A ScalarStep (simd_math.h) as a function of a vector; `s` holds its scalar in every lane.
template <ScalarStep E, class V>
struct StepOf {
  V s;
  HWY_INLINE HWY_ATTR V operator()(V v) const {
    if constexpr (E == ScalarStep::MulScalar) {
      return hn::Mul(v, s);
    } else if constexpr (E == ScalarStep::AddScalar) {
      return hn::Add(v, s);
    } else {
      return v;
    }
  }
};
// No step: what the kernels that are not fused loops pass.
struct NoStep {
  template <class V>
  HWY_INLINE HWY_ATTR V operator()(V v) const {
    return v;
  }
};

// Writes e(f(in[i])) to out[i]; out may equal in. The last partial vector goes through a zeroed
// buffer, so no lane reads or writes past n and every lane computes on a valid number.
template <class D, class F, class E = NoStep>
HWY_INLINE void Apply(D d, const hn::TFromD<D>* in, hn::TFromD<D>* out, size_t n, F f, E e = {}) {
  using T = hn::TFromD<D>;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(e(f(hn::LoadU(d, in + i))), d, out + i);
  if (i == n) return;
  HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(T)] = {};
  std::memcpy(buf, in + i, (n - i) * sizeof(T));
  hn::Store(e(f(hn::Load(d, buf))), d, buf);
  std::memcpy(out + i, buf, (n - i) * sizeof(T));
}

// Writes e(f(pa(a[i]), pb(b[i]))) to out[i]; out may equal a or b. The tail goes through
// zeroed buffers.
template <class D, class F, class E = NoStep, class PA = NoStep, class PB = NoStep>
HWY_INLINE void Apply2(D d, const hn::TFromD<D>* a, const hn::TFromD<D>* b, hn::TFromD<D>* out,
                       size_t n, F f, E e = {}, PA pa = {}, PB pb = {}) {
  using T = hn::TFromD<D>;
  const size_t lanes = hn::Lanes(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(e(f(pa(hn::LoadU(d, a + i)), pb(hn::LoadU(d, b + i)))), d, out + i);
  if (i == n) return;
  HWY_ALIGN T bufa[HWY_MAX_BYTES / sizeof(T)] = {};
  HWY_ALIGN T bufb[HWY_MAX_BYTES / sizeof(T)] = {};
  std::memcpy(bufa, a + i, (n - i) * sizeof(T));
  std::memcpy(bufb, b + i, (n - i) * sizeof(T));
  hn::Store(e(f(pa(hn::Load(d, bufa)), pb(hn::Load(d, bufb)))), d, bufa);
  std::memcpy(out + i, bufa, (n - i) * sizeof(T));
}

template <class T, class E = NoStep, class PA = NoStep, class PB = NoStep>
HWY_INLINE void BinaryT(Binary kind, const T* a, const T* b, T* out, size_t n, E e = {}, PA pa = {},
                        PB pb = {}) {
  const hn::ScalableTag<T> d;
  using V = Vec<decltype(d)>;
  const auto apply = [&](auto f) HWY_ATTR { Apply2(d, a, b, out, n, f, e, pa, pb); };
  switch (kind) {
    // One correctly rounded operation each, so every instruction set gives the scalar result.
    case Binary::Add:
      return apply([](V x, V y) HWY_ATTR { return hn::Add(x, y); });
    case Binary::Sub:
      return apply([](V x, V y) HWY_ATTR { return hn::Sub(x, y); });
    case Binary::Mul:
      return apply([](V x, V y) HWY_ATTR { return hn::Mul(x, y); });
    case Binary::Div:
      return apply([](V x, V y) HWY_ATTR { return hn::Div(x, y); });
    // x where x < y or x is NaN, else y: the scalar loop's choice, signed zeros included.
    case Binary::Minimum:
      return apply([](V x, V y) HWY_ATTR {
        return hn::IfThenElse(hn::Or(hn::Lt(x, y), hn::IsNaN(x)), x, y);
      });
    case Binary::Maximum:
      return apply([](V x, V y) HWY_ATTR {
        return hn::IfThenElse(hn::Or(hn::Gt(x, y), hn::IsNaN(x)), x, y);
      });
    // The activation gradients in the scalar loop's order of operations: the same bits.
    case Binary::TanhBackward:
      return apply([d](V g, V y)
                       HWY_ATTR { return hn::Mul(g, hn::Sub(hn::Set(d, T(1)), hn::Mul(y, y))); });
    case Binary::SigmoidBackward:
      return apply([d](V g, V y)
                       HWY_ATTR { return hn::Mul(hn::Mul(g, y), hn::Sub(hn::Set(d, T(1)), y)); });
    case Binary::ReluBackward:  // a NaN y passes g through
      return apply([d](V g, V y)
                       HWY_ATTR { return hn::IfThenZeroElse(hn::Le(y, hn::Zero(d)), g); });
    case Binary::GeluTanhBackward:
      return apply([d](V g, V x) HWY_ATTR { return hn::Mul(g, GeluTanhGradV(d, x)); });
    case Binary::GeluErfBackward:
      return apply([d](V g, V x) HWY_ATTR { return hn::Mul(g, GeluErfGradV(d, x)); });
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
template <class T, Binary K, ScalarStep E, ScalarStep PA, ScalarStep PB>
void BinaryOf(const T* a, const T* b, T* out, size_t n, T pa, T pb, T e) {
  const hn::ScalableTag<T> d;
  using V = Vec<decltype(d)>;
  BinaryT<T>(K, a, b, out, n, StepOf<E, V>{hn::Set(d, e)}, StepOf<PA, V>{hn::Set(d, pa)},
             StepOf<PB, V>{hn::Set(d, pb)});
}
// Kernels with a prologue only for Add and Mul (simd_binary_takes_prologue), on one operand.
template <class T, ScalarStep E, ScalarStep PA, ScalarStep PB>
SimdBinaryFn<T> BinaryKernelOf(Binary kind) {
  if constexpr (PA != ScalarStep::None || PB != ScalarStep::None) {
    if (kind == Binary::Add) return &BinaryOf<T, Binary::Add, E, PA, PB>;
    if (kind == Binary::Mul) return &BinaryOf<T, Binary::Mul, E, PA, PB>;
    return nullptr;
  } else {
    switch (kind) {
#define ADJOINT_CASE(k) \
  case Binary::k:       \
    return &BinaryOf<T, Binary::k, E, PA, PB>;
      ADJOINT_SIMD_BINARY_KINDS(ADJOINT_CASE)
#undef ADJOINT_CASE
      default:
        return nullptr;
    }
  }
}
// The run-time steps as template arguments, one at a time.
template <class T, ScalarStep PA, ScalarStep PB>
SimdBinaryFn<T> BinaryKernelWithPrologues(Binary kind, ScalarStep epilogue) {
  switch (epilogue) {
    case ScalarStep::MulScalar:
      return BinaryKernelOf<T, ScalarStep::MulScalar, PA, PB>(kind);
    case ScalarStep::AddScalar:
      return BinaryKernelOf<T, ScalarStep::AddScalar, PA, PB>(kind);
    default:
      return BinaryKernelOf<T, ScalarStep::None, PA, PB>(kind);
  }
}
template <class T>
SimdBinaryFn<T> BinaryKernelT(Binary kind, ScalarStep epilogue, ScalarStep prologue_a,
                              ScalarStep prologue_b) {
  using S = ScalarStep;
  if (prologue_a == S::MulScalar)
    return BinaryKernelWithPrologues<T, S::MulScalar, S::None>(kind, epilogue);
  if (prologue_a == S::AddScalar)
    return BinaryKernelWithPrologues<T, S::AddScalar, S::None>(kind, epilogue);
  if (prologue_b == S::MulScalar)
    return BinaryKernelWithPrologues<T, S::None, S::MulScalar>(kind, epilogue);
  if (prologue_b == S::AddScalar)
    return BinaryKernelWithPrologues<T, S::None, S::AddScalar>(kind, epilogue);
  return BinaryKernelWithPrologues<T, S::None, S::None>(kind, epilogue);
}
SimdBinaryFn<float> BinaryKernelF32(Binary kind, ScalarStep epilogue, ScalarStep prologue_a,
                                    ScalarStep prologue_b) {
  return BinaryKernelT<float>(kind, epilogue, prologue_a, prologue_b);
}
SimdBinaryFn<double> BinaryKernelF64(Binary kind, ScalarStep epilogue, ScalarStep prologue_a,
                                     ScalarStep prologue_b) {
  return BinaryKernelT<double>(kind, epilogue, prologue_a, prologue_b);
}
void BinaryF32(Binary kind, const float* a, const float* b, float* out, size_t n) {
  using S = ScalarStep;
  if (SimdBinaryFn<float> f = BinaryKernelOf<float, S::None, S::None, S::None>(kind))
    f(a, b, out, n, 0, 0, 0);
}
void BinaryF64(Binary kind, const double* a, const double* b, double* out, size_t n) {
  using S = ScalarStep;
  if (SimdBinaryFn<double> f = BinaryKernelOf<double, S::None, S::None, S::None>(kind))
    f(a, b, out, n, 0, 0, 0);
}

template <class T, class E = NoStep>
HWY_INLINE void UnaryT(Unary kind, const T* in, T* out, size_t n, T a, T b, E e = {}) {
  const hn::ScalableTag<T> d;
  using V = Vec<decltype(d)>;
  const V one = hn::Set(d, T(1));
  const auto apply = [&](auto f) HWY_ATTR { Apply(d, in, out, n, f, e); };
  switch (kind) {
    // One correctly rounded operation each, as the scalar loop.
    case Unary::Neg:  // 0 - x, as the scalar loop (so -(+0) is +0 there too)
      return apply([d](V x) HWY_ATTR { return hn::Sub(hn::Zero(d), x); });
    case Unary::AddScalar: {
      const V s = hn::Set(d, a);
      return apply([s](V x) HWY_ATTR { return hn::Add(x, s); });
    }
    case Unary::MulScalar: {
      const V s = hn::Set(d, a);
      return apply([s](V x) HWY_ATTR { return hn::Mul(x, s); });
    }
    case Unary::RSubScalar: {
      const V s = hn::Set(d, a);
      return apply([s](V x) HWY_ATTR { return hn::Sub(s, x); });
    }
    case Unary::RDivScalar: {
      const V s = hn::Set(d, a);
      return apply([s](V x) HWY_ATTR { return hn::Div(s, x); });
    }
    case Unary::Square:
      return apply([](V x) HWY_ATTR { return hn::Mul(x, x); });
    case Unary::Relu:  // x < 0 ? 0 : x, as the scalar loop: NaN and -0 pass through
      return apply([d](V x) HWY_ATTR { return hn::IfThenZeroElse(hn::Lt(x, hn::Zero(d)), x); });
    case Unary::PowScalar:  // a is 2 or 3 (simd_unary_handles(kind, a)), as the scalar loop
      if (a == T(2)) return apply([](V x) HWY_ATTR { return hn::Mul(x, x); });
      return apply([](V x) HWY_ATTR { return hn::Mul(hn::Mul(x, x), x); });
    case Unary::Exp:
      return apply([d](V x) HWY_ATTR { return ExpV(d, x); });
    case Unary::Expm1:
      return apply([d](V x) HWY_ATTR { return Expm1V(d, x); });
    case Unary::Log:
      return apply([d](V x) HWY_ATTR { return LogV(d, x); });
    case Unary::Log1p:
      return apply([d](V x) HWY_ATTR { return Log1pV(d, x); });
    case Unary::Sqrt:
      return apply([](V x) HWY_ATTR { return hn::Sqrt(x); });
    case Unary::Rsqrt:  // 1 / sqrt(x) with both steps correctly rounded, as the scalar loop
      return apply([one](V x) HWY_ATTR { return hn::Div(one, hn::Sqrt(x)); });
    case Unary::Tanh:
      return apply([d](V x) HWY_ATTR { return TanhV(d, x); });
    case Unary::Erf:
      return apply([d](V x) HWY_ATTR { return ErfV(d, x); });
    case Unary::Sigmoid:
      return apply([d](V x) HWY_ATTR { return SigmoidV(d, x); });
    case Unary::Silu:
      return apply([d](V x) HWY_ATTR { return hn::Mul(x, SigmoidV(d, x)); });
    case Unary::GeluErf:
      return apply([d](V x) HWY_ATTR { return GeluErfV(d, x); });
    case Unary::GeluTanh:
      return apply([d](V x) HWY_ATTR { return GeluTanhV(d, x); });
    case Unary::Softplus: {
      // a = beta, b = threshold: x where beta x > threshold, else log1p(exp(beta x)) / beta.
      const V beta = hn::Set(d, a), threshold = hn::Set(d, b);
      return apply([d, beta, threshold](V x) HWY_ATTR {
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
template <class T, Unary K, ScalarStep E>
void UnaryOf(const T* in, T* out, size_t n, T a, T b, T e) {
  const hn::ScalableTag<T> d;
  UnaryT<T>(K, in, out, n, a, b, StepOf<E, Vec<decltype(d)>>{hn::Set(d, e)});
}
template <class T, ScalarStep E>
SimdUnaryFn<T> UnaryKernelOf(Unary kind) {
  switch (kind) {
#define ADJOINT_CASE(k) \
  case Unary::k:        \
    return &UnaryOf<T, Unary::k, E>;
    ADJOINT_SIMD_UNARY_KINDS(ADJOINT_CASE)
#undef ADJOINT_CASE
    default:
      return nullptr;
  }
}
template <class T>
SimdUnaryFn<T> UnaryKernelT(Unary kind, ScalarStep epilogue) {
  switch (epilogue) {
    case ScalarStep::MulScalar:
      return UnaryKernelOf<T, ScalarStep::MulScalar>(kind);
    case ScalarStep::AddScalar:
      return UnaryKernelOf<T, ScalarStep::AddScalar>(kind);
    default:
      return UnaryKernelOf<T, ScalarStep::None>(kind);
  }
}
SimdUnaryFn<float> UnaryKernelF32(Unary kind, ScalarStep epilogue) {
  return UnaryKernelT<float>(kind, epilogue);
}
SimdUnaryFn<double> UnaryKernelF64(Unary kind, ScalarStep epilogue) {
  return UnaryKernelT<double>(kind, epilogue);
}
void UnaryF32(Unary kind, const float* in, float* out, size_t n, float a, float b) {
  if (SimdUnaryFn<float> f = UnaryKernelOf<float, ScalarStep::None>(kind)) f(in, out, n, a, b, 0);
}
void UnaryF64(Unary kind, const double* in, double* out, size_t n, double a, double b) {
  if (SimdUnaryFn<double> f = UnaryKernelOf<double, ScalarStep::None>(kind)) f(in, out, n, a, b, 0);
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
SimdUnaryFn<float> unary_kernel_f32(Unary kind, ScalarStep epilogue) {
  return HWY_DYNAMIC_DISPATCH(UnaryKernelF32)(kind, epilogue);
}
SimdUnaryFn<double> unary_kernel_f64(Unary kind, ScalarStep epilogue) {
  return HWY_DYNAMIC_DISPATCH(UnaryKernelF64)(kind, epilogue);
}
SimdBinaryFn<float> binary_kernel_f32(Binary kind, ScalarStep epilogue, ScalarStep prologue_a,
                                      ScalarStep prologue_b) {
  return HWY_DYNAMIC_DISPATCH(BinaryKernelF32)(kind, epilogue, prologue_a, prologue_b);
}
SimdBinaryFn<double> binary_kernel_f64(Binary kind, ScalarStep epilogue, ScalarStep prologue_a,
                                       ScalarStep prologue_b) {
  return HWY_DYNAMIC_DISPATCH(BinaryKernelF64)(kind, epilogue, prologue_a, prologue_b);
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
SimdUnaryFn<float> simd_unary_fn<float>(Unary kind, double a, ScalarStep epilogue) {
  return simd_unary_handles(kind, a) ? simd::unary_kernel_f32(kind, epilogue) : nullptr;
}
template <>
SimdUnaryFn<double> simd_unary_fn<double>(Unary kind, double a, ScalarStep epilogue) {
  return simd_unary_handles(kind, a) ? simd::unary_kernel_f64(kind, epilogue) : nullptr;
}
bool simd_binary_takes_prologue(Binary kind) { return kind == Binary::Add || kind == Binary::Mul; }

namespace {
bool prologues_ok(Binary kind, ScalarStep prologue_a, ScalarStep prologue_b) {
  const int steps = (prologue_a != ScalarStep::None) + (prologue_b != ScalarStep::None);
  return steps == 0 || (steps == 1 && simd_binary_takes_prologue(kind));
}
}  // namespace

template <>
SimdBinaryFn<float> simd_binary_fn<float>(Binary kind, ScalarStep epilogue, ScalarStep prologue_a,
                                          ScalarStep prologue_b) {
  if (!simd_binary_handles(kind) || !prologues_ok(kind, prologue_a, prologue_b)) return nullptr;
  return simd::binary_kernel_f32(kind, epilogue, prologue_a, prologue_b);
}
template <>
SimdBinaryFn<double> simd_binary_fn<double>(Binary kind, ScalarStep epilogue, ScalarStep prologue_a,
                                            ScalarStep prologue_b) {
  if (!simd_binary_handles(kind) || !prologues_ok(kind, prologue_a, prologue_b)) return nullptr;
  return simd::binary_kernel_f64(kind, epilogue, prologue_a, prologue_b);
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
    case Unary::Relu:
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
    case Unary::Relu:
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
