// The Adam/AdamW update of one parameter: the op-by-op reference (in-place tensor ops, in
// PyTorch's floating-point order) and the fused single-pass kernel that repeats its arithmetic
// element by element, plus the dispatch between them. Adam::update (adam.cpp) calls
// adam_update; the hyper-parameter checks and the state live there.
#include "optim/adam_fused.h"

#include <cfloat>
#include <cmath>

#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "adjoint/tensor_impl.h"
#include "core/mode_state.h"
#include "core/op_tracer.h"
#include "core/parallel.h"

// Note [Fused Adam is bitwise the op-by-op update]
// Resuming from a checkpoint must reproduce an uninterrupted run bit for bit, and runs must be
// deterministic whichever path a parameter takes (a strided or mixed-dtype parameter still
// goes op by op), so the fused kernel performs exactly the roundings of the in-place ops, in their
// order. What those ops compute (src/ops/inplace.cpp, src/backend/cpu/elementwise.cpp), for
// T = float or double, with x the tensor's element:
// - mul_(double s), add_(double s): the scalar is first rounded to T, then x * T(s), x + T(s)
//   (Unary::MulScalar / AddScalar).
// - add_(tensor y, alpha), alpha != 1: x + T(alpha) * y in T (add_scaled_into), a multiply
//   then an add, each rounded: the library builds for baseline x86-64, which has no FMA, so
//   the compiler cannot contract them.
// - add_(y), sub_(y), mul_(y), div_(y): x + y, x - y, x * y, x / y in T; div_ by a 0-d tensor
//   divides by its one element (the divisor was rounded to T when the 0-d tensor was made).
// - sqrt: correctly rounded in T (Highway's Sqrt is the sqrtps/sqrtpd instruction; strided
//   tensors use std::sqrt).
// No step is done in double for float32. The scalars (bias corrections, step size, ...) are
// computed once in double by AdamCoefficients for both paths, so they agree to the bit too.
// Where the target has fused multiply-add (-march with FMA, aarch64), GCC contracts a * b + c
// by default (-ffp-contract=fast for C++), so the op-by-op results would then depend on the
// compiler's choices in each kernel, which one pass cannot mirror: the fused kernel turns
// itself off there (adam_fused_available), as it does where float math carries excess
// precision (x87, FLT_EVAL_METHOD != 0). Elementwise results do not depend on how the range
// is split into chunks, so threading changes no bit either.
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

namespace adjoint::optim::detail {
namespace {

// The scalars of one update, in double, shared by both paths.
struct AdamCoefficients {
  double decay;            // AdamW: p *= 1 - lr * weight_decay
  double w;                // lerp weight 1 - beta1
  double one_minus_w;      // the other lerp branch multiplies by 1 - w (not always beta1)
  double one_minus_beta2;  // v's new-gradient weight
  double sqrt_bc2;         // sqrt(1 - beta2^t)
  double neg_step_size;    // -lr / (1 - beta1^t)

  explicit AdamCoefficients(const AdamStep& s) {
    decay = 1 - s.lr * s.weight_decay;
    w = 1 - s.beta1;
    one_minus_w = 1 - w;
    one_minus_beta2 = 1 - s.beta2;
    const double step = static_cast<double>(s.step);
    const double bias_correction1 = 1 - std::pow(s.beta1, step);
    const double bias_correction2 = 1 - std::pow(s.beta2, step);
    sqrt_bc2 = std::sqrt(bias_correction2);
    neg_step_size = -(s.lr / bias_correction1);
  }
};

// The AdamCoefficients rounded to T, as the in-place ops round their scalars.
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
void adam_fused_typed(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                      const AdamStep& s) {
  const AdamCoefficients k(s);
  const Coefficients<T> c{static_cast<T>(k.decay),
                          static_cast<T>(s.weight_decay),
                          static_cast<T>(k.w),
                          static_cast<T>(k.one_minus_w),
                          static_cast<T>(s.beta2),
                          static_cast<T>(k.one_minus_beta2),
                          static_cast<T>(k.sqrt_bc2),
                          static_cast<T>(s.eps),
                          static_cast<T>(k.neg_step_size)};
  T* p = static_cast<T*>(param.raw_data());
  const T* g = static_cast<const T*>(grad.raw_data());
  T* m = static_cast<T*>(exp_avg.raw_data());
  T* v = static_cast<T*>(exp_avg_sq.raw_data());
  const int64_t n = param.numel();
  const bool small_w = k.w < 0.5;
  const bool decay = s.weight_decay != 0;
  if (decay && s.decoupled) {
    adam_kernel_for<T, true, false>(small_w, p, g, m, v, n, c);
  } else if (decay) {
    adam_kernel_for<T, false, true>(small_w, p, g, m, v, n, c);
  } else {
    adam_kernel_for<T, false, false>(small_w, p, g, m, v, n, c);
  }
}

bool fused_applies(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                   const Tensor& exp_avg_sq) {
  // Grad mode on or a forward-mode level open: the in-place ops may record or move tangents
  // (or throw), which the kernel does not do.
  // Under compile the op-by-op update is traced instead: this kernel writes raw memory, which
  // a graph cannot record (Note [In-place ops under compile] in src/compile/trace.cpp).
  if (is_grad_enabled() || tls_mode.dual_visible != 0 || ::adjoint::detail::tracing()) return false;
  // On meta there is no memory to write: the op-by-op update runs there (the step of a memory
  // estimate, docs/devices.md).
  if (param.is_meta()) return false;
  const DType dt = param.dtype();
  if (dt != DType::Float32 && dt != DType::Float64) return false;
  const Tensor* all[] = {&param, &grad, &exp_avg, &exp_avg_sq};
  for (const Tensor* t : all) {
    if (!t->defined() || t->dtype() != dt || !(t->shape() == param.shape()) || !t->is_contiguous())
      return false;
  }
  // Aliasing operands (say a grad that is the parameter's own memory) see the op-by-op
  // update's intermediate values, which one pass would not.
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j)
      if (all[i]->shares_storage(*all[j])) return false;
  return true;
}

void bump(const Tensor& t, int times) {
  for (int i = 0; i < times; ++i) t.impl()->storage->bump_version();
}

}  // namespace

bool adam_fused_available() { return ADJOINT_ADAM_FUSED != 0; }

void adam_update_ops(Tensor& param, const Tensor& grad_in, Tensor& m, Tensor& v, const AdamStep& s,
                     const AdamScratch& scratch) {
  const AdamCoefficients k(s);
  Tensor grad = grad_in;
  if (s.weight_decay != 0) {
    if (s.decoupled) {
      param.mul_(k.decay);  // AdamW: decay the weights, not the gradient
    } else {
      Tensor g = scratch(param, 0);  // Adam: L2 term added to (a copy of) the gradient
      g.copy_(grad);
      g.add_(param, s.weight_decay);
      grad = g;
    }
  }

  Tensor t = scratch(param, 1);
  // m = lerp(m, grad, w), w = 1 - beta1, with torch's two-sided formula.
  t.copy_(grad);
  t.sub_(m);  // grad - m
  if (k.w < 0.5) {
    m.add_(t, k.w);  // m + w * (grad - m)
  } else {
    t.mul_(k.one_minus_w);  // grad - (grad - m) * (1 - w)
    m.copy_(grad);
    m.sub_(t);
  }
  // v = v * beta2 + (1 - beta2) * grad * grad  (addcmul multiplies left to right)
  v.mul_(s.beta2);
  t.copy_(grad);
  t.mul_(k.one_minus_beta2);
  t.mul_(grad);
  v.add_(t);

  // denom = sqrt(v) / sqrt(bias_correction2) + eps; a true division, as PyTorch (div_(Scalar)
  // would multiply by the reciprocal).
  Tensor denom = sqrt(v);
  denom.div_(scalar_tensor(k.sqrt_bc2, param.dtype()));
  denom.add_(s.eps);
  // p = p + (-step_size) * m / denom  (addcdiv: value * t1 / t2)
  t.copy_(m);
  t.mul_(k.neg_step_size);
  t.div_(denom);
  param.add_(t);
}

bool adam_update_fused(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                       const AdamStep& s) {
  if (!adam_fused_available() || !fused_applies(param, grad, exp_avg, exp_avg_sq)) return false;
  if (param.dtype() == DType::Float32) {
    adam_fused_typed<float>(param, grad, exp_avg, exp_avg_sq, s);
  } else {
    adam_fused_typed<double>(param, grad, exp_avg, exp_avg_sq, s);
  }
  // As many version bumps as the in-place ops make, so versions read the same either way.
  bump(param, s.weight_decay != 0 && s.decoupled ? 2 : 1);  // [mul_,] add_
  bump(exp_avg, 1 - s.beta1 < 0.5 ? 1 : 2);                 // add_, or copy_ + sub_
  bump(exp_avg_sq, 2);                                      // mul_, add_
  return true;
}

bool adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                 const AdamStep& s, const AdamScratch& scratch) {
  if (adam_update_fused(param, grad, exp_avg, exp_avg_sq, s)) return true;
  adam_update_ops(param, grad, exp_avg, exp_avg_sq, s, scratch);
  return false;
}

}  // namespace adjoint::optim::detail
