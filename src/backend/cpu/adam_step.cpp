// The fused Adam/AdamW step on the CPU: one pass over param, grad, exp_avg and exp_avg_sq that
// repeats, element by element, the roundings of the op-by-op update (Note [Fused Adam is
// bitwise the op-by-op update] in src/optim/adam_fused.cpp).
#include <cfloat>
#include <cmath>

#include "backend/device_kernels.h"
#include "core/parallel.h"

// Where the target has fused multiply-add (-march with FMA, aarch64), GCC contracts a * b + c
// by default (-ffp-contract=fast for C++), so the op-by-op results would then depend on the
// compiler's choices in each kernel, which one pass cannot mirror: the fused kernel turns
// itself off there (adam_step_exact), as it does where float math carries excess precision
// (x87, FLT_EVAL_METHOD != 0).
#if defined(__FP_FAST_FMA) || defined(__FP_FAST_FMAF) || defined(__FMA__) || \
    defined(__ARM_FEATURE_FMA) || defined(__aarch64__) || FLT_EVAL_METHOD != 0
#define ADJOINT_ADAM_FUSED 0
#else
#define ADJOINT_ADAM_FUSED 1
#endif
#if ADJOINT_ADAM_FUSED && defined(__SSE2__)
#define ADJOINT_ADAM_SSE2 1
#include <emmintrin.h>
#else
#define ADJOINT_ADAM_SSE2 0
#endif

namespace adjoint::kernels {
namespace {

// The AdamScalars rounded to T, as the in-place ops round their scalars.
template <class T>
struct Coefficients {
  T decay, weight_decay, w, one_minus_w, beta2, one_minus_beta2, sqrt_bc2, eps, neg_step_size;
};

// Elements per thread below which threads cost more than they save. The pass reads 4 and writes
// 3 values per element and does a sqrt and two divisions: a chunk of 2^16 elements (a few
// hundred microseconds) is well above the tens of microseconds that waking a pool thread can
// take. (On gpt-tiny with 2 threads, 2^14, 2^16 and 2^18 measured the same, ~4.3 ms a step:
// the pass is bound by memory bandwidth there.)
constexpr int64_t kGrain = 65536;

// The arithmetic is written once against a lane type S (V: one value or one SIMD register;
// add/sub/mul/div/sqrt: one IEEE operation each, so a SIMD lane rounds exactly as the scalar
// code): ScalarLanes is the reference and the tail, SseLanes the body. Explicit SSE2 rather
// than a loop left to the auto-vectoriser: std::sqrt may set errno, so GCC guards it with a
// call to sqrt and will not vectorise the loop (the build does not pass -fno-math-errno).
template <class T>
struct ScalarLanes {
  using V = T;
  static constexpr int64_t kLanes = 1;
  static V set(T x) { return x; }
  static V load(const T* p) { return *p; }
  static void store(T* p, V x) { *p = x; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) { return a * b; }
  static V div(V a, V b) { return a / b; }
  static V sqrt(V a) { return std::sqrt(a); }
};

#if ADJOINT_ADAM_SSE2
template <class T>
struct SseLanes;
template <>
struct SseLanes<float> {
  using V = __m128;
  static constexpr int64_t kLanes = 4;
  static V set(float x) { return _mm_set1_ps(x); }
  static V load(const float* p) { return _mm_loadu_ps(p); }
  static void store(float* p, V x) { _mm_storeu_ps(p, x); }
  static V add(V a, V b) { return _mm_add_ps(a, b); }
  static V sub(V a, V b) { return _mm_sub_ps(a, b); }
  static V mul(V a, V b) { return _mm_mul_ps(a, b); }
  static V div(V a, V b) { return _mm_div_ps(a, b); }
  static V sqrt(V a) { return _mm_sqrt_ps(a); }
};
template <>
struct SseLanes<double> {
  using V = __m128d;
  static constexpr int64_t kLanes = 2;
  static V set(double x) { return _mm_set1_pd(x); }
  static V load(const double* p) { return _mm_loadu_pd(p); }
  static void store(double* p, V x) { _mm_storeu_pd(p, x); }
  static V add(V a, V b) { return _mm_add_pd(a, b); }
  static V sub(V a, V b) { return _mm_sub_pd(a, b); }
  static V mul(V a, V b) { return _mm_mul_pd(a, b); }
  static V div(V a, V b) { return _mm_div_pd(a, b); }
  static V sqrt(V a) { return _mm_sqrt_pd(a); }
};
#endif

// Coefficients<T> broadcast to S's lanes.
template <class S>
struct LaneCoefficients {
  using V = typename S::V;
  V decay, weight_decay, w, one_minus_w, beta2, one_minus_beta2, sqrt_bc2, eps, neg_step_size;
  template <class T>
  explicit LaneCoefficients(const Coefficients<T>& c)
      : decay(S::set(c.decay)),
        weight_decay(S::set(c.weight_decay)),
        w(S::set(c.w)),
        one_minus_w(S::set(c.one_minus_w)),
        beta2(S::set(c.beta2)),
        one_minus_beta2(S::set(c.one_minus_beta2)),
        sqrt_bc2(S::set(c.sqrt_bc2)),
        eps(S::set(c.eps)),
        neg_step_size(S::set(c.neg_step_size)) {}
};

// The update of S::kLanes elements; each line names the in-place op of adam_update_ops whose
// rounding it repeats.
template <class S, bool kDecoupledDecay, bool kL2, bool kSmallW, class T>
inline void adam_lanes(T* p, const T* gr, T* m, T* v, const LaneCoefficients<S>& c) {
  using V = typename S::V;
  V param = S::load(p);
  if constexpr (kDecoupledDecay) param = S::mul(param, c.decay);  // param.mul_(1 - lr * wd)
  V g = S::load(gr);
  if constexpr (kL2) g = S::add(g, S::mul(c.weight_decay, param));  // g.add_(param, wd)
  const V m_old = S::load(m);
  const V diff = S::sub(g, m_old);  // t = grad; t.sub_(m)
  V m_new;
  if constexpr (kSmallW) {
    m_new = S::add(m_old, S::mul(c.w, diff));  // m.add_(t, w): m + T(w) * t
  } else {
    m_new = S::sub(g, S::mul(diff, c.one_minus_w));  // t.mul_(1 - w); m = grad; m.sub_(t)
  }
  V v_new = S::mul(S::load(v), c.beta2);                 // v.mul_(beta2)
  const V g2 = S::mul(S::mul(g, c.one_minus_beta2), g);  // t = grad; t.mul_(1 - b2); t.mul_(grad)
  v_new = S::add(v_new, g2);                             // v.add_(t)
  V denom = S::sqrt(v_new);                              // denom = sqrt(v)
  denom = S::div(denom, c.sqrt_bc2);                     // denom.div_(sqrt(bc2) as a 0-d tensor)
  denom = S::add(denom, c.eps);                          // denom.add_(eps)
  V update = S::mul(m_new, c.neg_step_size);             // t = m; t.mul_(-step_size)
  update = S::div(update, denom);                        // t.div_(denom)
  S::store(p, S::add(param, update));                    // param.add_(t)
  S::store(m, m_new);
  S::store(v, v_new);
}

template <class T, bool kDecoupledDecay, bool kL2, bool kSmallW>
void adam_chunk(T* p, const T* g, T* m, T* v, int64_t n, const Coefficients<T>& c) {
  int64_t i = 0;
#if ADJOINT_ADAM_SSE2
  using S = SseLanes<T>;
  const LaneCoefficients<S> cs(c);
  for (; i + S::kLanes <= n; i += S::kLanes)
    adam_lanes<S, kDecoupledDecay, kL2, kSmallW>(p + i, g + i, m + i, v + i, cs);
#endif
  const LaneCoefficients<ScalarLanes<T>> c1(c);
  for (; i < n; ++i)
    adam_lanes<ScalarLanes<T>, kDecoupledDecay, kL2, kSmallW>(p + i, g + i, m + i, v + i, c1);
}

template <class T, bool kDecoupledDecay, bool kL2, bool kSmallW>
void adam_kernel(T* p, const T* g, T* m, T* v, int64_t n, const Coefficients<T>& c) {
  parallel_for(n, kGrain, [&](int64_t begin, int64_t end) {
    adam_chunk<T, kDecoupledDecay, kL2, kSmallW>(p + begin, g + begin, m + begin, v + begin,
                                                 end - begin, c);
  });
}

template <class T, bool kDecoupledDecay, bool kL2>
void adam_kernel_for(bool small_w, T* p, const T* g, T* m, T* v, int64_t n,
                     const Coefficients<T>& c) {
  if (small_w) {
    adam_kernel<T, kDecoupledDecay, kL2, true>(p, g, m, v, n, c);
  } else {
    adam_kernel<T, kDecoupledDecay, kL2, false>(p, g, m, v, n, c);
  }
}

template <class T>
void adam_step_typed(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                     const Tensor& exp_avg_sq, const AdamScalars& s) {
  const Coefficients<T> c{static_cast<T>(s.decay),
                          static_cast<T>(s.weight_decay),
                          static_cast<T>(s.w),
                          static_cast<T>(s.one_minus_w),
                          static_cast<T>(s.beta2),
                          static_cast<T>(s.one_minus_beta2),
                          static_cast<T>(s.sqrt_bc2),
                          static_cast<T>(s.eps),
                          static_cast<T>(s.neg_step_size)};
  T* p = static_cast<T*>(param.raw_data());
  const T* g = static_cast<const T*>(grad.raw_data());
  T* m = static_cast<T*>(exp_avg.raw_data());
  T* v = static_cast<T*>(exp_avg_sq.raw_data());
  const int64_t n = param.numel();
  if (s.decoupled_decay) {
    adam_kernel_for<T, true, false>(s.small_w, p, g, m, v, n, c);
  } else if (s.l2) {
    adam_kernel_for<T, false, true>(s.small_w, p, g, m, v, n, c);
  } else {
    adam_kernel_for<T, false, false>(s.small_w, p, g, m, v, n, c);
  }
}

}  // namespace

bool cpu::adam_step_exact(Device) { return ADJOINT_ADAM_FUSED != 0; }

void cpu::adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                    const Tensor& exp_avg_sq, const AdamScalars& s) {
  if (param.dtype() == DType::Float32) {
    adam_step_typed<float>(param, grad, exp_avg, exp_avg_sq, s);
  } else {
    adam_step_typed<double>(param, grad, exp_avg, exp_avg_sq, s);
  }
}

}  // namespace adjoint::kernels
