// CPU batch norm kernels (backend/norm_kernels.h): per-channel moments, the forward with batch
// statistics and the input gradient, for an input [N, C, *] read as [N, C, S]; and group norm's
// forward, whose rows (an example's group: C / G channels of S) are contiguous in that layout.
// Channels run in parallel (parallel_for's fixed chunks), each channel reduced by one thread in a
// fixed order with double accumulators, so results do not depend on the thread count. The loops
// over one (n, c) segment of S contiguous elements are vectorised with Highway, built once per x86
// instruction set and chosen at run time as in simd_math.cpp; segments shorter than a few
// vectors (S = 1 for an input [N, C]) take the scalar loops, which a dispatched call would cost
// more than. A channels-last input takes batch_norm_channels_last.cpp's kernels instead, in place.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "adjoint/error.h"
#include "backend/cpu/batch_norm_channels_last.h"
#include "backend/cpu/opmath.h"
#include "backend/device_kernels.h"
#include "backend/kernels.h"
#include "backend/norm_kernels.h"
#include "core/dispatch.h"
#include "core/memory_format.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/batch_norm.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target, each time followed by this:
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace adjoint::kernels::bn_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Loads lanes of T at p as doubles (a float vector of half the width, widened).
template <class DD, class T>
HWY_INLINE hn::Vec<DD> LoadWide(DD dd, const T* p) {
  if constexpr (std::is_same_v<T, double>) {
    return hn::LoadU(dd, p);
  } else {
    const hn::Rebind<T, DD> dt;
    return hn::PromoteTo(dd, hn::LoadU(dt, p));
  }
}

// Four vector accumulators, added in a fixed tree at the end.
template <class DD>
HWY_INLINE double Total(DD dd, hn::Vec<DD> a0, hn::Vec<DD> a1, hn::Vec<DD> a2, hn::Vec<DD> a3) {
  return hn::GetLane(hn::SumOfLanes(dd, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
}

// sum(x) and sum((x - mu)^2) over [0, n), in double.
template <class T>
HWY_INLINE double SumT(const T* x, size_t n) {
  const hn::ScalableTag<double> dd;
  const size_t lanes = hn::Lanes(dd);
  auto a0 = hn::Zero(dd), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    a0 = hn::Add(a0, LoadWide(dd, x + i));
    a1 = hn::Add(a1, LoadWide(dd, x + i + lanes));
    a2 = hn::Add(a2, LoadWide(dd, x + i + 2 * lanes));
    a3 = hn::Add(a3, LoadWide(dd, x + i + 3 * lanes));
  }
  for (; i + lanes <= n; i += lanes) a0 = hn::Add(a0, LoadWide(dd, x + i));
  double s = Total(dd, a0, a1, a2, a3);
  for (; i < n; ++i) s += static_cast<double>(x[i]);
  return s;
}
template <class T>
HWY_INLINE double SumSqDevT(const T* x, size_t n, double mu) {
  const hn::ScalableTag<double> dd;
  const size_t lanes = hn::Lanes(dd);
  const auto m = hn::Set(dd, mu);
  auto a0 = hn::Zero(dd), a1 = a0, a2 = a0, a3 = a0;
  auto sq = [&](const T* p) HWY_ATTR {
    const auto d = hn::Sub(LoadWide(dd, p), m);
    return hn::Mul(d, d);
  };
  size_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    a0 = hn::Add(a0, sq(x + i));
    a1 = hn::Add(a1, sq(x + i + lanes));
    a2 = hn::Add(a2, sq(x + i + 2 * lanes));
    a3 = hn::Add(a3, sq(x + i + 3 * lanes));
  }
  for (; i + lanes <= n; i += lanes) a0 = hn::Add(a0, sq(x + i));
  double s = Total(dd, a0, a1, a2, a3);
  for (; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - mu;
    s += d * d;
  }
  return s;
}
// sums[0] += sum(g), sums[1] += sum(g (x - mu)) over [0, n), in double.
template <class T>
HWY_INLINE void DotDevT(const T* g, const T* x, size_t n, double mu, double* sums) {
  const hn::ScalableTag<double> dd;
  const size_t lanes = hn::Lanes(dd);
  const auto m = hn::Set(dd, mu);
  auto s0 = hn::Zero(dd), s1 = s0, d0 = s0, d1 = s0;
  size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const auto g0 = LoadWide(dd, g + i), g1 = LoadWide(dd, g + i + lanes);
    s0 = hn::Add(s0, g0);
    s1 = hn::Add(s1, g1);
    d0 = hn::MulAdd(g0, hn::Sub(LoadWide(dd, x + i), m), d0);
    d1 = hn::MulAdd(g1, hn::Sub(LoadWide(dd, x + i + lanes), m), d1);
  }
  for (; i + lanes <= n; i += lanes) {
    const auto g0 = LoadWide(dd, g + i);
    s0 = hn::Add(s0, g0);
    d0 = hn::MulAdd(g0, hn::Sub(LoadWide(dd, x + i), m), d0);
  }
  double sg = hn::GetLane(hn::SumOfLanes(dd, hn::Add(s0, s1)));
  double sgx = hn::GetLane(hn::SumOfLanes(dd, hn::Add(d0, d1)));
  for (; i < n; ++i) {
    const double gi = static_cast<double>(g[i]);
    sg += gi;
    sgx += gi * (static_cast<double>(x[i]) - mu);
  }
  sums[0] += sg;
  sums[1] += sgx;
}
// y = x a + b over [0, n).
template <class T>
HWY_INLINE void AffineT(const T* x, T* y, size_t n, T a, T b) {
  const hn::ScalableTag<T> d;
  const size_t lanes = hn::Lanes(d);
  const auto va = hn::Set(d, a), vb = hn::Set(d, b);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::MulAdd(hn::LoadU(d, x + i), va, vb), d, y + i);
  for (; i < n; ++i) y[i] = x[i] * a + b;
}
// o = g a + x b + c over [0, n).
template <class T>
HWY_INLINE void Affine2T(const T* g, const T* x, T* o, size_t n, T a, T b, T c) {
  const hn::ScalableTag<T> d;
  const size_t lanes = hn::Lanes(d);
  const auto va = hn::Set(d, a), vb = hn::Set(d, b), vc = hn::Set(d, c);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(hn::MulAdd(hn::LoadU(d, g + i), va, hn::MulAdd(hn::LoadU(d, x + i), vb, vc)), d,
               o + i);
  for (; i < n; ++i) o[i] = g[i] * a + (x[i] * b + c);
}

double SumF32(const float* x, size_t n) { return SumT(x, n); }
double SumF64(const double* x, size_t n) { return SumT(x, n); }
double SumSqDevF32(const float* x, size_t n, double mu) { return SumSqDevT(x, n, mu); }
double SumSqDevF64(const double* x, size_t n, double mu) { return SumSqDevT(x, n, mu); }
void DotDevF32(const float* g, const float* x, size_t n, double mu, double* s) {
  DotDevT(g, x, n, mu, s);
}
void DotDevF64(const double* g, const double* x, size_t n, double mu, double* s) {
  DotDevT(g, x, n, mu, s);
}
void AffineF32(const float* x, float* y, size_t n, float a, float b) { AffineT(x, y, n, a, b); }
void AffineF64(const double* x, double* y, size_t n, double a, double b) { AffineT(x, y, n, a, b); }
void Affine2F32(const float* g, const float* x, float* o, size_t n, float a, float b, float c) {
  Affine2T(g, x, o, n, a, b, c);
}
void Affine2F64(const double* g, const double* x, double* o, size_t n, double a, double b,
                double c) {
  Affine2T(g, x, o, n, a, b, c);
}

}  // namespace HWY_NAMESPACE
}  // namespace adjoint::kernels::bn_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace adjoint::kernels {
namespace bn_simd {

HWY_EXPORT(SumF32);
HWY_EXPORT(SumF64);
HWY_EXPORT(SumSqDevF32);
HWY_EXPORT(SumSqDevF64);
HWY_EXPORT(DotDevF32);
HWY_EXPORT(DotDevF64);
HWY_EXPORT(AffineF32);
HWY_EXPORT(AffineF64);
HWY_EXPORT(Affine2F32);
HWY_EXPORT(Affine2F64);

}  // namespace bn_simd
namespace {

// Segments shorter than this take the scalar loops (the same arithmetic, in double).
constexpr int64_t kSimdMin = 32;

template <class T>
double seg_sum(const T* x, int64_t n) {
  if (n >= kSimdMin) {
    if constexpr (std::is_same_v<T, float>)
      return HWY_DYNAMIC_DISPATCH(bn_simd::SumF32)(x, n);
    else
      return HWY_DYNAMIC_DISPATCH(bn_simd::SumF64)(x, n);
  }
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]);
  return s;
}
template <class T>
double seg_sum_sq_dev(const T* x, int64_t n, double mu) {
  if (n >= kSimdMin) {
    if constexpr (std::is_same_v<T, float>)
      return HWY_DYNAMIC_DISPATCH(bn_simd::SumSqDevF32)(x, n, mu);
    else
      return HWY_DYNAMIC_DISPATCH(bn_simd::SumSqDevF64)(x, n, mu);
  }
  double s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - mu;
    s += d * d;
  }
  return s;
}
template <class T>
void seg_dot_dev(const T* g, const T* x, int64_t n, double mu, double* sums) {
  if (n >= kSimdMin) {
    if constexpr (std::is_same_v<T, float>)
      return HWY_DYNAMIC_DISPATCH(bn_simd::DotDevF32)(g, x, n, mu, sums);
    else
      return HWY_DYNAMIC_DISPATCH(bn_simd::DotDevF64)(g, x, n, mu, sums);
  }
  for (int64_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(g[i]);
    sums[0] += gi;
    sums[1] += gi * (static_cast<double>(x[i]) - mu);
  }
}
template <class T>
void seg_affine(const T* x, T* y, int64_t n, T a, T b) {
  if (n >= kSimdMin) {
    if constexpr (std::is_same_v<T, float>)
      return HWY_DYNAMIC_DISPATCH(bn_simd::AffineF32)(x, y, n, a, b);
    else
      return HWY_DYNAMIC_DISPATCH(bn_simd::AffineF64)(x, y, n, a, b);
  }
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * a + b;
}
template <class T>
void seg_affine2(const T* g, const T* x, T* o, int64_t n, T a, T b, T c) {
  if (n >= kSimdMin) {
    if constexpr (std::is_same_v<T, float>)
      return HWY_DYNAMIC_DISPATCH(bn_simd::Affine2F32)(g, x, o, n, a, b, c);
    else
      return HWY_DYNAMIC_DISPATCH(bn_simd::Affine2F64)(g, x, o, n, a, b, c);
  }
  for (int64_t i = 0; i < n; ++i) o[i] = g[i] * a + (x[i] * b + c);
}

Tensor contiguous_of(const Tensor& t) { return t.is_contiguous() ? t : cast(t, t.dtype()); }

// widen and narrow_to (Note [Reduced-precision kernels]) that keep a channels-last tensor
// channels-last, so a 16-bit channels-last input stays on the in-place kernels and its result
// keeps the input's layout.
Tensor widen_in_layout(const Tensor& t) {
  if (!is_reduced(t) || !is_channels_last(t)) return widen(t);
  return bn_cl::cast_keeping_layout(t, opmath_dtype(t.dtype()));
}
Tensor narrow_in_layout(const Tensor& t, DType dtype) {
  if (!t.defined() || t.dtype() == dtype || !is_channels_last(t)) return narrow_to(t, dtype);
  return bn_cl::cast_keeping_layout(t, dtype);
}

// x [N, C, *] as [N, C, S].
struct Layout {
  int64_t n, c, s;
  explicit Layout(const Tensor& x) : n(x.size(0)), c(x.size(1)), s(1) {
    for (int64_t d = 2; d < x.dim(); ++d) s *= x.size(d);
  }
  int64_t per_channel() const { return n * s; }
  int64_t offset(int64_t i, int64_t ch) const { return (i * c + ch) * s; }
};

int64_t channel_grain(const Layout& l) {
  return std::max<int64_t>(32768 / std::max<int64_t>(l.per_channel(), 1), 1);
}

// Note [Batch norm moments in one pass]
// A channel's values are N segments of S contiguous elements, one per example, C S elements
// apart. Reading the channel twice (the mean, then the squared deviations from it) pays the jump
// between segments twice and reads the data from memory twice; instead each segment gets its own
// mean and squared deviations in two passes over it while it sits in L1, and the segments are
// merged in order with Chan et al.'s formula (the pairwise update of a count, a mean and a sum of
// squared deviations), which keeps the two-pass accuracy: no E[x^2] - E[x]^2 cancellation.

// The mean and the sum of squared deviations of channel ch.
template <class T>
std::pair<double, double> channel_moments(const T* xs, const Layout& l, int64_t ch) {
  double count = 0, mu = 0, ss = 0;
  const double seg = static_cast<double>(l.s);
  for (int64_t i = 0; i < l.n; ++i) {
    const T* p = xs + l.offset(i, ch);
    if (i + 1 < l.n) __builtin_prefetch(xs + l.offset(i + 1, ch));
    const double m = seg_sum(p, l.s) / seg;
    const double q = seg_sum_sq_dev(p, l.s, m);
    const double total = count + seg, delta = m - mu;
    mu += delta * (seg / total);
    ss += q + delta * delta * (count * seg / total);
    count = total;
  }
  // No elements: the mean is 0 / 0, as mean() gives.
  if (count == 0) mu = std::numeric_limits<double>::quiet_NaN();
  return {mu, ss};
}

}  // namespace

Tensor cpu::batch_norm_moments(const Tensor& x, int64_t correction) {
  const char* op = "batch_norm_stats";
  ADJOINT_ASSERT(x.dim() >= 2 && (correction == 0 || correction == 1));
  if (is_reduced(x))  // See Note [Reduced-precision kernels]
    return narrow_to(batch_norm_moments(widen_in_layout(x), correction), x.dtype());
  if (is_channels_last(x)) return bn_cl::moments(x, correction);
  const Layout l(x);
  const Tensor xc = contiguous_of(x);
  Tensor out = make_empty({2, l.c}, x.dtype());
  dispatch_opmath_floating(x.dtype(), op, [&]<class T>() {
    const T* xs = xc.data_ptr<T>();
    T* means = out.data_ptr<T>();
    T* vars = means + l.c;
    const double denom = static_cast<double>(l.per_channel() - correction);
    parallel_for(l.c, channel_grain(l), [&](int64_t begin, int64_t end) {
      for (int64_t ch = begin; ch < end; ++ch) {
        const auto [mu, ss] = channel_moments(xs, l, ch);
        means[ch] = static_cast<T>(mu);
        vars[ch] = static_cast<T>(ss / denom);  // 0 / 0 = NaN below two elements, as var()
      }
    });
  });
  return out;
}

BatchNormForward cpu::batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 double eps) {
  const char* op = "batch_norm";
  ADJOINT_ASSERT(x.dim() >= 2);
  if (is_reduced(x)) {  // See Note [Reduced-precision kernels]
    BatchNormForward wide = batch_norm(widen_in_layout(x), widen(weight), widen(bias), eps);
    return {narrow_in_layout(wide.y, x.dtype()), narrow_to(wide.mean, x.dtype()),
            narrow_to(wide.rstd, x.dtype())};
  }
  const Layout l(x);
  ADJOINT_ASSERT((!weight.defined() || weight.numel() == l.c) &&
                 (!bias.defined() || bias.numel() == l.c));
  if (is_channels_last(x)) return bn_cl::forward(x, weight, bias, eps);
  const Tensor xc = contiguous_of(x);
  const Tensor w = weight.defined() ? contiguous_of(weight) : Tensor();
  const Tensor b = bias.defined() ? contiguous_of(bias) : Tensor();
  BatchNormForward out;
  out.y = make_empty(x.shape(), x.dtype());
  out.mean = make_empty({l.c}, x.dtype());
  out.rstd = make_empty({l.c}, x.dtype());
  dispatch_opmath_floating(x.dtype(), op, [&]<class T>() {
    const T* xs = xc.data_ptr<T>();
    const T* ws = w.defined() ? w.data_ptr<T>() : nullptr;
    const T* bs = b.defined() ? b.data_ptr<T>() : nullptr;
    T* ys = out.y.data_ptr<T>();
    T* means = out.mean.data_ptr<T>();
    T* rstds = out.rstd.data_ptr<T>();
    parallel_for(l.c, channel_grain(l), [&](int64_t begin, int64_t end) {
      for (int64_t ch = begin; ch < end; ++ch) {
        const auto [mu, ss] = channel_moments(xs, l, ch);
        const double rs = 1.0 / std::sqrt(ss / static_cast<double>(l.per_channel()) + eps);
        means[ch] = static_cast<T>(mu);
        rstds[ch] = static_cast<T>(rs);
        // y = (x - mean) rstd w + b = x scale + shift
        const double scale = ws ? rs * static_cast<double>(ws[ch]) : rs;
        const double shift = (bs ? static_cast<double>(bs[ch]) : 0.0) - mu * scale;
        for (int64_t i = 0; i < l.n; ++i)
          seg_affine(xs + l.offset(i, ch), ys + l.offset(i, ch), l.s, static_cast<T>(scale),
                     static_cast<T>(shift));
      }
    });
  });
  return out;
}

Tensor cpu::batch_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                                const Tensor& mean, const Tensor& rstd) {
  const char* op = "batch_norm_backward";
  ADJOINT_ASSERT(x.dim() >= 2 && gy.shape() == x.shape());
  const Layout l(x);
  ADJOINT_ASSERT(mean.numel() == l.c && rstd.numel() == l.c &&
                 (!weight.defined() || weight.numel() == l.c));
  if (is_reduced(x) || is_reduced(gy))  // See Note [Reduced-precision kernels]
    return narrow_in_layout(batch_norm_backward(widen_in_layout(gy), widen_in_layout(x),
                                                widen(weight), widen(mean), widen(rstd)),
                            x.dtype());
  if (is_channels_last(x)) return bn_cl::backward(gy, x, weight, mean, rstd);
  Tensor out = make_empty(x.shape(), x.dtype());
  if (out.numel() == 0) return out;
  const Tensor gc = contiguous_of(gy), xc = contiguous_of(x), mc = contiguous_of(mean),
               rc = contiguous_of(rstd);
  const Tensor w = weight.defined() ? contiguous_of(weight) : Tensor();
  dispatch_opmath_floating(x.dtype(), op, [&]<class T>() {
    const T* gs = gc.data_ptr<T>();
    const T* xs = xc.data_ptr<T>();
    const T* ms = mc.data_ptr<T>();
    const T* rs = rc.data_ptr<T>();
    const T* ws = w.defined() ? w.data_ptr<T>() : nullptr;
    T* os = out.data_ptr<T>();
    const double inv_m = 1.0 / static_cast<double>(l.per_channel());
    parallel_for(l.c, channel_grain(l), [&](int64_t begin, int64_t end) {
      for (int64_t ch = begin; ch < end; ++ch) {
        const double mu = static_cast<double>(ms[ch]), a = static_cast<double>(rs[ch]);
        const double wc = ws ? static_cast<double>(ws[ch]) : 1.0;
        double sums[2] = {0, 0};  // sum(gy), sum(gy (x - mean))
        for (int64_t i = 0; i < l.n; ++i) {
          if (i + 1 < l.n) {  // the next segment is C S elements away: start its loads early
            __builtin_prefetch(gs + l.offset(i + 1, ch));
            __builtin_prefetch(xs + l.offset(i + 1, ch));
          }
          seg_dot_dev(gs + l.offset(i, ch), xs + l.offset(i, ch), l.s, mu, sums);
        }
        // rstd w (gy - mean(gy) - x̂ mean(gy x̂)) = A gy + B x + C with A = rstd w,
        // B = -w rstd^3 mean(gy (x - mean)), C = -rstd w mean(gy) - B mean
        const double ca = a * wc;
        const double cb = -wc * a * a * a * sums[1] * inv_m;
        const double cc = -ca * sums[0] * inv_m - cb * mu;
        for (int64_t i = 0; i < l.n; ++i)
          seg_affine2(gs + l.offset(i, ch), xs + l.offset(i, ch), os + l.offset(i, ch), l.s,
                      static_cast<T>(ca), static_cast<T>(cb), static_cast<T>(cc));
      }
    });
  });
  return out;
}

GroupNormForward cpu::group_norm(const Tensor& x, int64_t groups, const Tensor& weight,
                                 const Tensor& bias, double eps) {
  const char* op = "group_norm";
  ADJOINT_ASSERT(x.dim() >= 2 && groups > 0 && x.size(1) % groups == 0);
  if (is_reduced(x)) {  // See Note [Reduced-precision kernels]
    GroupNormForward wide = group_norm(widen(x), groups, widen(weight), widen(bias), eps);
    return {narrow_to(wide.y, x.dtype()), narrow_to(wide.mean, x.dtype()),
            narrow_to(wide.rstd, x.dtype())};
  }
  const Layout l(x);
  const int64_t per_group = l.c / groups, row = per_group * l.s;
  const Tensor xc = contiguous_of(x);
  const Tensor w = weight.defined() ? contiguous_of(weight) : Tensor();
  const Tensor b = bias.defined() ? contiguous_of(bias) : Tensor();
  GroupNormForward out;
  out.y = make_empty(x.shape(), x.dtype());
  out.mean = make_empty({l.n, groups}, x.dtype());
  out.rstd = make_empty({l.n, groups}, x.dtype());
  dispatch_opmath_floating(x.dtype(), op, [&]<class T>() {
    const T* xs = xc.data_ptr<T>();
    const T* ws = w.defined() ? w.data_ptr<T>() : nullptr;
    const T* bs = b.defined() ? b.data_ptr<T>() : nullptr;
    T* ys = out.y.data_ptr<T>();
    T* means = out.mean.data_ptr<T>();
    T* rstds = out.rstd.data_ptr<T>();
    const int64_t grain = std::max<int64_t>(32768 / std::max<int64_t>(row, 1), 1);
    parallel_for(l.n * groups, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = xs + r * row;
        T* yr = ys + r * row;
        // Two passes over the row (mean, then squared deviations): no cancellation.
        const double mu = seg_sum(xr, row) / static_cast<double>(row);  // NaN for no elements
        const double rs =
            1.0 / std::sqrt(seg_sum_sq_dev(xr, row, mu) / static_cast<double>(row) + eps);
        means[r] = static_cast<T>(mu);
        rstds[r] = static_cast<T>(rs);
        for (int64_t k = 0; k < per_group; ++k) {
          const int64_t ch = (r % groups) * per_group + k;
          const double scale = ws ? rs * static_cast<double>(ws[ch]) : rs;
          const double shift = (bs ? static_cast<double>(bs[ch]) : 0.0) - mu * scale;
          seg_affine(xr + k * l.s, yr + k * l.s, l.s, static_cast<T>(scale), static_cast<T>(shift));
        }
      }
    });
  });
  return out;
}

}  // namespace adjoint::kernels
#endif  // HWY_ONCE
