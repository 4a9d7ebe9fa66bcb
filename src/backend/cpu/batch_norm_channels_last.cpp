// Batch norm's kernels on channels-last inputs (batch_norm_channels_last.h): the rows of C
// contiguous channels are cut into fixed chunks (by size, never by thread count), each chunk's
// per-channel sums run vectorised across the channels with Highway in double accumulators, and
// the chunks' results are merged in chunk order, so results are bitwise the same for any thread
// count. See Note [Channels-last batch norm].
#include "backend/cpu/batch_norm_channels_last.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "adjoint/error.h"
#include "backend/kernels.h"
#include "core/dispatch.h"
#include "core/memory_format.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/batch_norm_channels_last.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target, each time followed by this:
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace adjoint::kernels::bn_cl_simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Every loop below walks the channels j in vectors of the tag's lanes, then the last C mod lanes
// channels in one-lane vectors, so each channel sees the same operations (one FMA where the
// vectors have one) whichever lane it falls in. Each channel's sum runs over the rows in order.

// Lanes of T at p as doubles.
template <class DD, class T>
HWY_INLINE hn::Vec<DD> LoadWide(DD dd, const T* p) {
  if constexpr (std::is_same_v<T, double>) {
    return hn::LoadU(dd, p);
  } else {
    const hn::Rebind<T, DD> dt;
    return hn::PromoteTo(dd, hn::LoadU(dt, p));
  }
}

// For the channels [j, j + lanes of dd) over `rows` rows of c: acc += sum(x);
// acc += sum((x - mu)^2); sg += sum(g) and sgx += sum(g (x - mu)).
template <class DD, class T>
HWY_INLINE void SumCols(DD dd, const T* x, size_t rows, size_t c, size_t j, double* acc) {
  auto a = hn::LoadU(dd, acc + j);
  for (size_t r = 0; r < rows; ++r) a = hn::Add(a, LoadWide(dd, x + r * c + j));
  hn::StoreU(a, dd, acc + j);
}
template <class DD, class T>
HWY_INLINE void SumSqDevCols(DD dd, const T* x, size_t rows, size_t c, size_t j, const double* mu,
                             double* acc) {
  const auto m = hn::LoadU(dd, mu + j);
  auto a = hn::LoadU(dd, acc + j);
  for (size_t r = 0; r < rows; ++r) {
    const auto d = hn::Sub(LoadWide(dd, x + r * c + j), m);
    a = hn::MulAdd(d, d, a);
  }
  hn::StoreU(a, dd, acc + j);
}
template <class DD, class T>
HWY_INLINE void DotDevCols(DD dd, const T* g, const T* x, size_t rows, size_t c, size_t j,
                           const double* mu, double* sg, double* sgx) {
  const auto m = hn::LoadU(dd, mu + j);
  auto s = hn::LoadU(dd, sg + j), t = hn::LoadU(dd, sgx + j);
  for (size_t r = 0; r < rows; ++r) {
    const auto gv = LoadWide(dd, g + r * c + j);
    s = hn::Add(s, gv);
    t = hn::MulAdd(gv, hn::Sub(LoadWide(dd, x + r * c + j), m), t);
  }
  hn::StoreU(s, dd, sg + j);
  hn::StoreU(t, dd, sgx + j);
}

// The per-channel sums over a chunk of `rows` rows: whole vectors of channels, then the remaining
// channels one lane each.
template <class T>
HWY_INLINE void ChunkSumT(const T* x, size_t rows, size_t c, double* acc) {
  const hn::ScalableTag<double> dd;
  const hn::CappedTag<double, 1> d1;
  const size_t lanes = hn::Lanes(dd);
  size_t j = 0;
  for (; j + lanes <= c; j += lanes) SumCols(dd, x, rows, c, j, acc);
  for (; j < c; ++j) SumCols(d1, x, rows, c, j, acc);
}
template <class T>
HWY_INLINE void ChunkSumSqDevT(const T* x, size_t rows, size_t c, const double* mu, double* acc) {
  const hn::ScalableTag<double> dd;
  const hn::CappedTag<double, 1> d1;
  const size_t lanes = hn::Lanes(dd);
  size_t j = 0;
  for (; j + lanes <= c; j += lanes) SumSqDevCols(dd, x, rows, c, j, mu, acc);
  for (; j < c; ++j) SumSqDevCols(d1, x, rows, c, j, mu, acc);
}
template <class T>
HWY_INLINE void ChunkDotDevT(const T* g, const T* x, size_t rows, size_t c, const double* mu,
                             double* sg, double* sgx) {
  const hn::ScalableTag<double> dd;
  const hn::CappedTag<double, 1> d1;
  const size_t lanes = hn::Lanes(dd);
  size_t j = 0;
  for (; j + lanes <= c; j += lanes) DotDevCols(dd, g, x, rows, c, j, mu, sg, sgx);
  for (; j < c; ++j) DotDevCols(d1, g, x, rows, c, j, mu, sg, sgx);
}

// y = x a + b per channel (a, b: [c] of T) over `rows` rows, one FMA per element.
template <class T>
HWY_INLINE void ChunkAffineT(const T* x, T* y, size_t rows, size_t c, const T* a, const T* b) {
  const hn::ScalableTag<T> d;
  const hn::CappedTag<T, 1> d1;
  const size_t lanes = hn::Lanes(d);
  for (size_t r = 0; r < rows; ++r) {
    const T* xr = x + r * c;
    T* yr = y + r * c;
    auto one = [&](auto tag, size_t j) HWY_ATTR {
      hn::StoreU(hn::MulAdd(hn::LoadU(tag, xr + j), hn::LoadU(tag, a + j), hn::LoadU(tag, b + j)),
                 tag, yr + j);
    };
    size_t j = 0;
    for (; j + lanes <= c; j += lanes) one(d, j);
    for (; j < c; ++j) one(d1, j);
  }
}
// o = g a + (x b + cc) per channel over `rows` rows.
template <class T>
HWY_INLINE void ChunkAffine2T(const T* g, const T* x, T* o, size_t rows, size_t c, const T* a,
                              const T* b, const T* cc) {
  const hn::ScalableTag<T> d;
  const hn::CappedTag<T, 1> d1;
  const size_t lanes = hn::Lanes(d);
  for (size_t r = 0; r < rows; ++r) {
    const T* gr = g + r * c;
    const T* xr = x + r * c;
    T* orow = o + r * c;
    auto one = [&](auto tag, size_t j) HWY_ATTR {
      const auto inner =
          hn::MulAdd(hn::LoadU(tag, xr + j), hn::LoadU(tag, b + j), hn::LoadU(tag, cc + j));
      hn::StoreU(hn::MulAdd(hn::LoadU(tag, gr + j), hn::LoadU(tag, a + j), inner), tag, orow + j);
    };
    size_t j = 0;
    for (; j + lanes <= c; j += lanes) one(d, j);
    for (; j < c; ++j) one(d1, j);
  }
}

void ChunkSumF32(const float* x, size_t rows, size_t c, double* acc) { ChunkSumT(x, rows, c, acc); }
void ChunkSumF64(const double* x, size_t rows, size_t c, double* acc) {
  ChunkSumT(x, rows, c, acc);
}
void ChunkSumSqDevF32(const float* x, size_t rows, size_t c, const double* mu, double* acc) {
  ChunkSumSqDevT(x, rows, c, mu, acc);
}
void ChunkSumSqDevF64(const double* x, size_t rows, size_t c, const double* mu, double* acc) {
  ChunkSumSqDevT(x, rows, c, mu, acc);
}
void ChunkDotDevF32(const float* g, const float* x, size_t rows, size_t c, const double* mu,
                    double* sg, double* sgx) {
  ChunkDotDevT(g, x, rows, c, mu, sg, sgx);
}
void ChunkDotDevF64(const double* g, const double* x, size_t rows, size_t c, const double* mu,
                    double* sg, double* sgx) {
  ChunkDotDevT(g, x, rows, c, mu, sg, sgx);
}
void ChunkAffineF32(const float* x, float* y, size_t rows, size_t c, const float* a,
                    const float* b) {
  ChunkAffineT(x, y, rows, c, a, b);
}
void ChunkAffineF64(const double* x, double* y, size_t rows, size_t c, const double* a,
                    const double* b) {
  ChunkAffineT(x, y, rows, c, a, b);
}
void ChunkAffine2F32(const float* g, const float* x, float* o, size_t rows, size_t c,
                     const float* a, const float* b, const float* cc) {
  ChunkAffine2T(g, x, o, rows, c, a, b, cc);
}
void ChunkAffine2F64(const double* g, const double* x, double* o, size_t rows, size_t c,
                     const double* a, const double* b, const double* cc) {
  ChunkAffine2T(g, x, o, rows, c, a, b, cc);
}

}  // namespace HWY_NAMESPACE
}  // namespace adjoint::kernels::bn_cl_simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace adjoint::kernels {
namespace bn_cl_simd {

HWY_EXPORT(ChunkSumF32);
HWY_EXPORT(ChunkSumF64);
HWY_EXPORT(ChunkSumSqDevF32);
HWY_EXPORT(ChunkSumSqDevF64);
HWY_EXPORT(ChunkDotDevF32);
HWY_EXPORT(ChunkDotDevF64);
HWY_EXPORT(ChunkAffineF32);
HWY_EXPORT(ChunkAffineF64);
HWY_EXPORT(ChunkAffine2F32);
HWY_EXPORT(ChunkAffine2F64);

}  // namespace bn_cl_simd
namespace {

template <class T>
void chunk_sum(const T* x, size_t rows, size_t c, double* acc) {
  if constexpr (std::is_same_v<T, float>)
    HWY_DYNAMIC_DISPATCH(bn_cl_simd::ChunkSumF32)(x, rows, c, acc);
  else
    HWY_DYNAMIC_DISPATCH(bn_cl_simd::ChunkSumF64)(x, rows, c, acc);
}
template <class T>
void chunk_sum_sq_dev(const T* x, size_t rows, size_t c, const double* mu, double* acc) {
  if constexpr (std::is_same_v<T, float>)
    HWY_DYNAMIC_DISPATCH(bn_cl_simd::ChunkSumSqDevF32)(x, rows, c, mu, acc);
  else
    HWY_DYNAMIC_DISPATCH(bn_cl_simd::ChunkSumSqDevF64)(x, rows, c, mu, acc);
}
template <class T>
void chunk_dot_dev(const T* g, const T* x, size_t rows, size_t c, const double* mu, double* sg,
                   double* sgx) {
  if constexpr (std::is_same_v<T, float>)
    HWY_DYNAMIC_DISPATCH(bn_cl_simd::ChunkDotDevF32)(g, x, rows, c, mu, sg, sgx);
  else
    HWY_DYNAMIC_DISPATCH(bn_cl_simd::ChunkDotDevF64)(g, x, rows, c, mu, sg, sgx);
}
template <class T>
void chunk_affine(const T* x, T* y, size_t rows, size_t c, const T* a, const T* b) {
  if constexpr (std::is_same_v<T, float>)
    HWY_DYNAMIC_DISPATCH(bn_cl_simd::ChunkAffineF32)(x, y, rows, c, a, b);
  else
    HWY_DYNAMIC_DISPATCH(bn_cl_simd::ChunkAffineF64)(x, y, rows, c, a, b);
}
template <class T>
void chunk_affine2(const T* g, const T* x, T* o, size_t rows, size_t c, const T* a, const T* b,
                   const T* cc) {
  if constexpr (std::is_same_v<T, float>)
    HWY_DYNAMIC_DISPATCH(bn_cl_simd::ChunkAffine2F32)(g, x, o, rows, c, a, b, cc);
  else
    HWY_DYNAMIC_DISPATCH(bn_cl_simd::ChunkAffine2F64)(g, x, o, rows, c, a, b, cc);
}

// Note [Channels-last batch norm]
// A channels-last x [N, C, *sp] is M = N prod(sp) rows of C channels, one channel every C
// elements. The reductions walk it as it lies: the rows are cut into chunks of about kChunk
// elements (sized to stay in L2 between two passes, and fixed by the shape alone), each chunk's
// per-channel sums run across the channels in vectors of double accumulators, row after row, and
// the per-chunk results are combined in chunk order afterwards. The moments keep the contract of
// Note [Batch norm moments in one pass]: each chunk gets its own mean and squared deviations in
// two passes while it sits in cache, and the chunks merge with Chan et al.'s formula (no
// E[x^2] - E[x]^2 cancellation), all in double. The plain kernel merges per-example segments
// instead, so the two layouts' statistics agree to rounding, not bitwise. The affine passes
// (y = x scale + shift, and the input gradient's g a + x b + c) take per-channel coefficients
// rounded to x's dtype and one FMA per element, as the plain kernel's vector loops do.
constexpr int64_t kChunk = 16384;

// x channels-last, as rows of c channels cut into chunks.
struct Rows {
  int64_t rows, c, per_chunk, chunks;
  explicit Rows(const Tensor& x) : rows(x.numel() / x.size(1)), c(x.size(1)) {
    per_chunk = std::max<int64_t>(kChunk / c, 1);
    chunks = (rows + per_chunk - 1) / per_chunk;
  }
  int64_t first(int64_t k) const { return k * per_chunk; }
  int64_t count(int64_t k) const { return std::min(per_chunk, rows - first(k)); }
  int64_t offset(int64_t k) const { return first(k) * c; }
};

// Per-channel means and sums of squared deviations of channels-last xs, merged over the chunks.
template <class T>
void moments_of(const T* xs, const Rows& l, std::vector<double>& mean, std::vector<double>& ss) {
  const size_t c = static_cast<size_t>(l.c);
  std::vector<double> part(static_cast<size_t>(l.chunks) * 2 * c, 0.0);  // chunk: mean, ss
  parallel_for(l.chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const T* p = xs + l.offset(k);
      const size_t rows = static_cast<size_t>(l.count(k));
      double* m = part.data() + static_cast<size_t>(k) * 2 * c;
      chunk_sum(p, rows, c, m);
      for (size_t j = 0; j < c; ++j) m[j] /= static_cast<double>(rows);
      chunk_sum_sq_dev(p, rows, c, m, m + c);
    }
  });
  mean.assign(c, 0.0);
  ss.assign(c, 0.0);
  std::vector<double> count(c, 0.0);
  for (int64_t k = 0; k < l.chunks; ++k) {
    const double* m = part.data() + static_cast<size_t>(k) * 2 * c;
    const double seg = static_cast<double>(l.count(k));
    for (size_t j = 0; j < c; ++j) {
      const double total = count[j] + seg, delta = m[j] - mean[j];
      mean[j] += delta * (seg / total);
      ss[j] += m[c + j] + delta * delta * (count[j] * seg / total);
      count[j] = total;
    }
  }
}

// t in the channels-last layout: itself when it is, else a copy.
Tensor in_channels_last(const Tensor& t) {
  if (is_channels_last(t)) return t;
  Tensor out = empty_channels_last(t.shape(), t.dtype());
  copy_into(out, t);
  return out;
}

Tensor contiguous_of(const Tensor& t) { return t.is_contiguous() ? t : cast(t, t.dtype()); }

}  // namespace

// A channels-last tensor is never empty (an empty tensor counts as contiguous), so M >= 1 below.

Tensor bn_cl::moments(const Tensor& x, int64_t correction) {
  ADJOINT_ASSERT(is_channels_last(x) && (correction == 0 || correction == 1));
  const Rows l(x);
  Tensor out = make_empty({2, l.c}, x.dtype());
  dispatch_opmath_floating(x.dtype(), "batch_norm_stats", [&]<class T>() {
    std::vector<double> mean, ss;
    moments_of(x.data_ptr<T>(), l, mean, ss);
    T* means = out.data_ptr<T>();
    T* vars = means + l.c;
    const double denom = static_cast<double>(l.rows - correction);
    for (int64_t j = 0; j < l.c; ++j) {
      means[j] = static_cast<T>(mean[static_cast<size_t>(j)]);
      vars[j] = static_cast<T>(ss[static_cast<size_t>(j)] / denom);  // 0 / 0 = NaN, as var()
    }
  });
  return out;
}

BatchNormForward bn_cl::forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                double eps) {
  ADJOINT_ASSERT(is_channels_last(x));
  const Rows l(x);
  const Tensor w = weight.defined() ? contiguous_of(weight) : Tensor();
  const Tensor b = bias.defined() ? contiguous_of(bias) : Tensor();
  BatchNormForward out;
  out.y = empty_channels_last(x.shape(), x.dtype());
  out.mean = make_empty({l.c}, x.dtype());
  out.rstd = make_empty({l.c}, x.dtype());
  dispatch_opmath_floating(x.dtype(), "batch_norm", [&]<class T>() {
    const T* xs = x.data_ptr<T>();
    const T* ws = w.defined() ? w.data_ptr<T>() : nullptr;
    const T* bs = b.defined() ? b.data_ptr<T>() : nullptr;
    std::vector<double> mean, ss;
    moments_of(xs, l, mean, ss);
    std::vector<T> scale(static_cast<size_t>(l.c)), shift(scale.size());
    T* means = out.mean.data_ptr<T>();
    T* rstds = out.rstd.data_ptr<T>();
    for (size_t j = 0; j < scale.size(); ++j) {
      const double rs = 1.0 / std::sqrt(ss[j] / static_cast<double>(l.rows) + eps);
      means[j] = static_cast<T>(mean[j]);
      rstds[j] = static_cast<T>(rs);
      // y = (x - mean) rstd w + b = x scale + shift
      const double sc = ws ? rs * static_cast<double>(ws[j]) : rs;
      scale[j] = static_cast<T>(sc);
      shift[j] = static_cast<T>((bs ? static_cast<double>(bs[j]) : 0.0) - mean[j] * sc);
    }
    T* ys = out.y.data_ptr<T>();
    parallel_for(l.chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k)
        chunk_affine(xs + l.offset(k), ys + l.offset(k), static_cast<size_t>(l.count(k)),
                     static_cast<size_t>(l.c), scale.data(), shift.data());
    });
  });
  return out;
}

Tensor bn_cl::backward(const Tensor& gy_in, const Tensor& x, const Tensor& weight,
                       const Tensor& mean, const Tensor& rstd) {
  ADJOINT_ASSERT(is_channels_last(x) && gy_in.shape() == x.shape());
  const Rows l(x);
  Tensor out = empty_channels_last(x.shape(), x.dtype());
  const Tensor gy = in_channels_last(gy_in);
  const Tensor mc = contiguous_of(mean), rc = contiguous_of(rstd);
  const Tensor w = weight.defined() ? contiguous_of(weight) : Tensor();
  dispatch_opmath_floating(x.dtype(), "batch_norm_backward", [&]<class T>() {
    const T* gs = gy.data_ptr<T>();
    const T* xs = x.data_ptr<T>();
    const T* ws = w.defined() ? w.data_ptr<T>() : nullptr;
    const T* ms = mc.data_ptr<T>();
    const T* rs = rc.data_ptr<T>();
    const size_t c = static_cast<size_t>(l.c);
    std::vector<double> mu(c);
    for (size_t j = 0; j < c; ++j) mu[j] = static_cast<double>(ms[j]);
    // Per chunk: sum(gy), sum(gy (x - mean)) per channel; then summed in chunk order.
    std::vector<double> part(static_cast<size_t>(l.chunks) * 2 * c, 0.0);
    parallel_for(l.chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        double* s = part.data() + static_cast<size_t>(k) * 2 * c;
        chunk_dot_dev(gs + l.offset(k), xs + l.offset(k), static_cast<size_t>(l.count(k)), c,
                      mu.data(), s, s + c);
      }
    });
    std::vector<double> sums(2 * c, 0.0);
    for (int64_t k = 0; k < l.chunks; ++k)
      for (size_t i = 0; i < 2 * c; ++i) sums[i] += part[static_cast<size_t>(k) * 2 * c + i];
    // rstd w (gy - mean(gy) - x̂ mean(gy x̂)) = A gy + B x + C with A = rstd w,
    // B = -w rstd^3 mean(gy (x - mean)), C = -rstd w mean(gy) - B mean
    const double inv_m = 1.0 / static_cast<double>(l.rows);
    std::vector<T> ca(c), cb(c), cc(c);
    for (size_t j = 0; j < c; ++j) {
      const double a = static_cast<double>(rs[j]);
      const double wc = ws ? static_cast<double>(ws[j]) : 1.0;
      const double va = a * wc, vb = -wc * a * a * a * sums[c + j] * inv_m;
      ca[j] = static_cast<T>(va);
      cb[j] = static_cast<T>(vb);
      cc[j] = static_cast<T>(-va * sums[j] * inv_m - vb * mu[j]);
    }
    T* os = out.data_ptr<T>();
    parallel_for(l.chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k)
        chunk_affine2(gs + l.offset(k), xs + l.offset(k), os + l.offset(k),
                      static_cast<size_t>(l.count(k)), c, ca.data(), cb.data(), cc.data());
    });
  });
  return out;
}

Tensor bn_cl::cast_keeping_layout(const Tensor& t, DType dtype) {
  ADJOINT_ASSERT(is_channels_last(t));
  // t's memory and the result's, both viewed as [N, *sp, C], are contiguous: one plain pass.
  const Shape& s = t.shape();
  Shape mem_shape{s[0]}, mem_strides{t.strides()[0]};
  for (std::size_t d = 2; d < s.size(); ++d) {
    mem_shape.push_back(s[d]);
    mem_strides.push_back(t.strides()[d]);
  }
  mem_shape.push_back(s[1]);
  mem_strides.push_back(1);
  Tensor out = empty_channels_last(s, dtype);
  copy_into(make_view(out, mem_shape, contiguous_strides(mem_shape), out.impl()->offset),
            make_view(t, mem_shape, mem_strides, t.impl()->offset));
  return out;
}

}  // namespace adjoint::kernels
#endif  // HWY_ONCE
