// Vectorised pooling rows (see pool_simd.h), built by Highway once per instruction set and
// dispatched at run time as simd_math.cpp (whose ISA cap applies here too: it disables targets
// for the whole process). Lanes are output columns; a stride of 1 loads the lanes' inputs with
// one unaligned load, other strides gather them. Columns left over after the last full vector
// take vectors of 8 and 4 lanes, then run the same computation one column at a time.
#include "backend/cpu/pool_simd.h"

#include <cmath>
#include <cstddef>
#include <limits>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/pool_simd.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// foreach_target.h re-includes this file once per target, each time followed by these:
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace adjoint::kernels::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Note [Strided lanes]
// A lane's element of window column b is p[lane * stride] with p the first lane's. A stride of
// 1 is one unaligned load. A stride of 2 is half of an interleaved load of 2 Lanes elements:
// the even half of the load at p for b = 0, the odd half of the load at p - 1 otherwise. Neither
// reads outside the windows' span when a window has two columns or more: the load at p ends one
// past the last lane's element b = 0, which lies within that lane's window (before its column
// 1), and the load at p - 1 starts after the first lane's column b - 1 and ends on the last
// lane's element. Other strides (and one-column windows) gather.
template <class D, class VI>
HWY_INLINE hn::Vec<D> LoadStrided(D d, const hn::TFromD<D>* p, int64_t stride, int64_t b,
                                  int64_t kcount, VI offsets) {
  if (stride == 1) return hn::LoadU(d, p);
  if (stride == 2 && kcount >= 2) {
    hn::Vec<D> even, odd;
    if (b == 0) {
      hn::LoadInterleaved2(d, p, even, odd);
      return even;
    }
    hn::LoadInterleaved2(d, p - 1, even, odd);
    return odd;
  }
  return hn::GatherIndex(d, p, offsets);
}

// p[lane * stride] += add[lane], with the loads of LoadStrided (Note [Strided lanes]); a stride
// of 2 stores the interleaved pair back whole, the other half unchanged.
template <class D, class VI>
HWY_INLINE void AddStrided(D d, hn::TFromD<D>* p, int64_t stride, int64_t b, int64_t kcount,
                           VI offsets, hn::Vec<D> add) {
  if (stride == 1) {
    hn::StoreU(hn::Add(hn::LoadU(d, p), add), d, p);
  } else if (stride == 2 && kcount >= 2) {
    hn::TFromD<D>* q = b == 0 ? p : p - 1;
    hn::Vec<D> even, odd;
    hn::LoadInterleaved2(d, q, even, odd);
    if (b == 0)
      even = hn::Add(even, add);
    else
      odd = hn::Add(odd, add);
    hn::StoreInterleaved2(even, odd, d, q);
  } else {
    hn::ScatterIndex(hn::Add(hn::GatherIndex(d, p, offsets), add), d, p, offsets);
  }
}

// lane * stride in every lane (built in memory: 64-bit lanes have no multiply on every target).
template <class DI>
HWY_INLINE hn::Vec<DI> StrideOffsets(DI di, int64_t stride) {
  using TI = hn::TFromD<DI>;
  HWY_ALIGN TI lanes[HWY_MAX_BYTES / sizeof(TI)];
  for (size_t l = 0; l < hn::Lanes(di); ++l) lanes[l] = static_cast<TI>(l * stride);
  return hn::Load(di, lanes);
}

// The columns [ow, ow + k Lanes(d)) of a max pooling row, k as large as fits in n; ow advances.
template <class D>
HWY_INLINE void MaxPoolVectors(D d, const hn::TFromD<D>* x, int64_t W, int64_t h0, int64_t hcount,
                               int64_t hstep, int64_t w0, int64_t stride, int64_t kcount,
                               int64_t wstep, int64_t n, int64_t* out, int64_t& ow) {
  using T = hn::TFromD<D>;
  const hn::RebindToSigned<D> di;
  using TI = hn::TFromD<decltype(di)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  if (ow + lanes > n) return;
  const auto offsets = StrideOffsets(di, stride);
  HWY_ALIGN TI idx[HWY_MAX_BYTES / sizeof(TI)];
  for (; ow + lanes <= n; ow += lanes) {
    const int64_t first = h0 * W + w0 + ow * stride;
    auto best = hn::Set(d, -std::numeric_limits<T>::infinity());
    auto bi = hn::Add(hn::Set(di, static_cast<TI>(first)), offsets);
    for (int64_t a = 0; a < hcount; ++a) {
      const int64_t h = h0 + a * hstep;
      for (int64_t b = 0; b < kcount; ++b) {
        const int64_t i = h * W + w0 + ow * stride + b * wstep;
        const auto v = LoadStrided(d, x + i, stride, b, kcount, offsets);
        const auto take = hn::Or(hn::Gt(v, best), hn::IsNaN(v));
        best = hn::IfThenElse(take, v, best);
        bi = hn::IfThenElse(hn::RebindMask(di, take),
                            hn::Add(hn::Set(di, static_cast<TI>(i)), offsets), bi);
      }
    }
    hn::Store(bi, di, idx);
    for (int64_t l = 0; l < lanes; ++l) out[ow + l] = static_cast<int64_t>(idx[l]);
  }
}

// Full vectors, then vectors of 8 and 4 lanes (a row of 14 pooled columns is 8 + 4 + 2), then
// one column at a time.
template <class T>
void MaxPoolRow(const T* x, int64_t W, int64_t h0, int64_t hcount, int64_t hstep, int64_t w0,
                int64_t stride, int64_t kcount, int64_t wstep, int64_t n, int64_t* out) {
  int64_t ow = 0;
  MaxPoolVectors(hn::ScalableTag<T>(), x, W, h0, hcount, hstep, w0, stride, kcount, wstep, n, out,
                 ow);
  MaxPoolVectors(hn::CappedTag<T, 8>(), x, W, h0, hcount, hstep, w0, stride, kcount, wstep, n, out,
                 ow);
  MaxPoolVectors(hn::CappedTag<T, 4>(), x, W, h0, hcount, hstep, w0, stride, kcount, wstep, n, out,
                 ow);
  for (; ow < n; ++ow) {  // the scalar loop of pool.cpp, one column
    T best = -std::numeric_limits<T>::infinity();
    int64_t bi = h0 * W + w0 + ow * stride;
    for (int64_t a = 0; a < hcount; ++a)
      for (int64_t b = 0; b < kcount; ++b) {
        const int64_t i = (h0 + a * hstep) * W + w0 + ow * stride + b * wstep;
        const T v = x[i];
        const bool take = v > best || v != v;  // branch-free: random data mispredicts
        best = take ? v : best;
        bi = take ? i : bi;
      }
    out[ow] = bi;
  }
}

// The columns [ow, ow + k Lanes(d)) of an average pooling row; ow advances.
template <class D>
HWY_INLINE void AvgPoolVectors(D d, const hn::TFromD<D>* x, int64_t W, int64_t h0, int64_t hcount,
                               int64_t w0, int64_t stride, int64_t kcount, int64_t n,
                               hn::TFromD<D> divisor, hn::TFromD<D>* out, int64_t& ow) {
  using T = hn::TFromD<D>;
  const hn::RebindToSigned<D> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  if (ow + lanes > n) return;
  const auto offsets = StrideOffsets(di, stride);
  const auto div = hn::Set(d, divisor);
  for (; ow + lanes <= n; ow += lanes) {
    auto sum = hn::Zero(d);
    for (int64_t a = 0; a < hcount; ++a) {
      const T* row = x + (h0 + a) * W + w0 + ow * stride;
      for (int64_t b = 0; b < kcount; ++b)
        sum = hn::Add(sum, LoadStrided(d, row + b, stride, b, kcount, offsets));
    }
    hn::StoreU(hn::Div(sum, div), d, out + ow);
  }
}

template <class T>
void AvgPoolRow(const T* x, int64_t W, int64_t h0, int64_t hcount, int64_t w0, int64_t stride,
                int64_t kcount, int64_t n, T divisor, T* out) {
  int64_t ow = 0;
  AvgPoolVectors(hn::ScalableTag<T>(), x, W, h0, hcount, w0, stride, kcount, n, divisor, out, ow);
  AvgPoolVectors(hn::CappedTag<T, 8>(), x, W, h0, hcount, w0, stride, kcount, n, divisor, out, ow);
  AvgPoolVectors(hn::CappedTag<T, 4>(), x, W, h0, hcount, w0, stride, kcount, n, divisor, out, ow);
  for (; ow < n; ++ow) {
    T sum = 0;
    for (int64_t a = 0; a < hcount; ++a) {
      const T* row = x + (h0 + a) * W + w0 + ow * stride;
      for (int64_t b = 0; b < kcount; ++b) sum += row[b];
    }
    out[ow] = sum / divisor;
  }
}

// row[ow * stride + b] += v[ow] for ow in [0, n), b from kcount - 1 down to 0: each element
// then receives its columns' values in increasing ow, the order of the scalar loop over
// outputs (one b touches distinct elements, so a vector's lanes never collide).
template <class D>
HWY_INLINE void AvgBackwardVectors(D d, hn::TFromD<D>* p, int64_t stride, int64_t b, int64_t kcount,
                                   const hn::TFromD<D>* v, int64_t n, int64_t& ow) {
  const hn::RebindToSigned<D> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  if (ow + lanes > n) return;
  const auto offsets = StrideOffsets(di, stride);
  for (; ow + lanes <= n; ow += lanes)
    AddStrided(d, p + ow * stride, stride, b, kcount, offsets, hn::LoadU(d, v + ow));
}

template <class T>
void AvgPoolBackwardRow(T* row, int64_t stride, int64_t kcount, int64_t n, const T* v) {
  for (int64_t b = kcount - 1; b >= 0; --b) {
    int64_t ow = 0;
    AvgBackwardVectors(hn::ScalableTag<T>(), row + b, stride, b, kcount, v, n, ow);
    AvgBackwardVectors(hn::CappedTag<T, 8>(), row + b, stride, b, kcount, v, n, ow);
    AvgBackwardVectors(hn::CappedTag<T, 4>(), row + b, stride, b, kcount, v, n, ow);
    for (; ow < n; ++ow) row[ow * stride + b] += v[ow];
  }
}

void AvgPoolBackwardRowF32(float* row, int64_t stride, int64_t k, int64_t n, const float* v) {
  AvgPoolBackwardRow(row, stride, k, n, v);
}
void AvgPoolBackwardRowF64(double* row, int64_t stride, int64_t k, int64_t n, const double* v) {
  AvgPoolBackwardRow(row, stride, k, n, v);
}

void MaxPoolRowF32(const float* x, int64_t W, int64_t h0, int64_t hc, int64_t hs, int64_t w0,
                   int64_t s, int64_t k, int64_t ws, int64_t n, int64_t* out) {
  MaxPoolRow(x, W, h0, hc, hs, w0, s, k, ws, n, out);
}
void MaxPoolRowF64(const double* x, int64_t W, int64_t h0, int64_t hc, int64_t hs, int64_t w0,
                   int64_t s, int64_t k, int64_t ws, int64_t n, int64_t* out) {
  MaxPoolRow(x, W, h0, hc, hs, w0, s, k, ws, n, out);
}
void AvgPoolRowF32(const float* x, int64_t W, int64_t h0, int64_t hc, int64_t w0, int64_t s,
                   int64_t k, int64_t n, float div, float* out) {
  AvgPoolRow(x, W, h0, hc, w0, s, k, n, div, out);
}
void AvgPoolRowF64(const double* x, int64_t W, int64_t h0, int64_t hc, int64_t w0, int64_t s,
                   int64_t k, int64_t n, double div, double* out) {
  AvgPoolRow(x, W, h0, hc, w0, s, k, n, div, out);
}

}  // namespace HWY_NAMESPACE
}  // namespace adjoint::kernels::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace adjoint::kernels::simd {

HWY_EXPORT(MaxPoolRowF32);
HWY_EXPORT(MaxPoolRowF64);
HWY_EXPORT(AvgPoolRowF32);
HWY_EXPORT(AvgPoolRowF64);
HWY_EXPORT(AvgPoolBackwardRowF32);
HWY_EXPORT(AvgPoolBackwardRowF64);

void avg_pool_backward_row(float* row, int64_t stride, int64_t kcount, int64_t n, const float* v) {
  HWY_DYNAMIC_DISPATCH(AvgPoolBackwardRowF32)(row, stride, kcount, n, v);
}
void avg_pool_backward_row(double* row, int64_t stride, int64_t kcount, int64_t n,
                           const double* v) {
  HWY_DYNAMIC_DISPATCH(AvgPoolBackwardRowF64)(row, stride, kcount, n, v);
}

void max_pool_row(const float* x, int64_t W, int64_t h0, int64_t hcount, int64_t hstep, int64_t w0,
                  int64_t stride, int64_t kcount, int64_t wstep, int64_t n, int64_t* out) {
  HWY_DYNAMIC_DISPATCH(MaxPoolRowF32)(x, W, h0, hcount, hstep, w0, stride, kcount, wstep, n, out);
}
void max_pool_row(const double* x, int64_t W, int64_t h0, int64_t hcount, int64_t hstep, int64_t w0,
                  int64_t stride, int64_t kcount, int64_t wstep, int64_t n, int64_t* out) {
  HWY_DYNAMIC_DISPATCH(MaxPoolRowF64)(x, W, h0, hcount, hstep, w0, stride, kcount, wstep, n, out);
}
void avg_pool_row(const float* x, int64_t W, int64_t h0, int64_t hcount, int64_t w0, int64_t stride,
                  int64_t kcount, int64_t n, float divisor, float* out) {
  HWY_DYNAMIC_DISPATCH(AvgPoolRowF32)(x, W, h0, hcount, w0, stride, kcount, n, divisor, out);
}
void avg_pool_row(const double* x, int64_t W, int64_t h0, int64_t hcount, int64_t w0,
                  int64_t stride, int64_t kcount, int64_t n, double divisor, double* out) {
  HWY_DYNAMIC_DISPATCH(AvgPoolRowF64)(x, W, h0, hcount, w0, stride, kcount, n, divisor, out);
}

}  // namespace adjoint::kernels::simd
#endif  // HWY_ONCE
