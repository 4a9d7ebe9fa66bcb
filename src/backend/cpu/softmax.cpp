// kernels::softmax and softmax_backward: numerically stable softmax and log-softmax along one
// dim of a float tensor, and their gradients given the output. Each row subtracts its maximum
// before exponentiating and sums in double. Rows (or blocks of columns when the dim is not the
// last) are split across threads; every row is computed by one thread in a fixed order, so
// results do not depend on the thread count. Rows along the last dim use the SIMD exp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "adjoint/error.h"
#include "backend/cpu/opmath.h"
#include "backend/cpu/row_math.h"
#include "backend/cpu/simd_math.h"
#include "backend/device_kernels.h"
#include "backend/kernels.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

// The running maximum; a NaN anywhere in the row wins (and then poisons the whole row).
template <class T>
inline T max_nan(T a, T v) {
  return (v > a || v != v) ? v : a;
}

// Rows per thread chunk for rows of n elements.
int64_t row_grain(int64_t n) { return std::max<int64_t>(32768 / std::max<int64_t>(n, 1), 1); }

// Softmax along the last dim of a contiguous [rows, n] block.
template <class T>
void softmax_last(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  parallel_for(rows, row_grain(n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * n;
      T* yr = y + r * n;
      if (!log) {
        softmax_row(xr, yr, n);
        continue;
      }
      const T m = simd_max(xr, n);  // NaN anywhere makes the whole row NaN
      simd_exp_shifted(xr, m, yr, n);
      // (x - m) - log(sum) keeps float32 precision when |m| is large
      const T lse = static_cast<T>(std::log(sum_double(yr, n)));
      for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - m) - lse;
    }
  });
}

// Gradient along the last dim of contiguous [rows, n] blocks:
// softmax: out = y (gy - sum(gy y)); log-softmax: out = gy - exp(y) sum(gy).
template <class T>
void softmax_backward_last(const T* gy, const T* y, T* out, int64_t rows, int64_t n, bool log) {
  parallel_for(rows, row_grain(n), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* g = gy + r * n;
      const T* yr = y + r * n;
      T* o = out + r * n;
      if (log) {
        const T s = static_cast<T>(sum_double(g, n));
        simd_exp_shifted(yr, T(0), o, n);
        for (int64_t j = 0; j < n; ++j) o[j] = g[j] - o[j] * s;
      } else {
        const T s = static_cast<T>(dot_double(g, yr, n));
        for (int64_t j = 0; j < n; ++j) o[j] = yr[j] * (g[j] - s);
      }
    }
  });
}

// The same along the middle dim of contiguous [outer, n, inner] blocks, a block of up to 64
// inner columns at a time.
template <class T>
void softmax_backward_middle(const T* gy, const T* y, T* out, int64_t outer, int64_t n,
                             int64_t inner, bool log) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  const int64_t per_item = n * std::min(inner, kBlock);
  parallel_for(outer * blocks, std::max<int64_t>(32768 / std::max<int64_t>(per_item, 1), 1),
               [&](int64_t begin, int64_t end) {
                 double acc[kBlock];
                 for (int64_t w = begin; w < end; ++w) {
                   const int64_t o = w / blocks, i0 = (w % blocks) * kBlock;
                   const int64_t cols = std::min(kBlock, inner - i0);
                   const int64_t base = o * n * inner + i0;
                   for (int64_t j = 0; j < cols; ++j) acc[j] = 0;
                   for (int64_t d = 0; d < n; ++d)
                     for (int64_t j = 0; j < cols; ++j) {
                       const int64_t at = base + d * inner + j;
                       acc[j] += log ? static_cast<double>(gy[at])
                                     : static_cast<double>(gy[at]) * static_cast<double>(y[at]);
                     }
                   for (int64_t d = 0; d < n; ++d)
                     for (int64_t j = 0; j < cols; ++j) {
                       const int64_t at = base + d * inner + j;
                       const T s = static_cast<T>(acc[j]);
                       out[at] = log ? gy[at] - std::exp(y[at]) * s : y[at] * (gy[at] - s);
                     }
                 }
               });
}

// t as a contiguous tensor of `shape` (t broadcasts to it): t itself when it already is one.
Tensor contiguous_as(const Tensor& t, const Shape& shape) {
  if (t.is_contiguous() && t.shape() == shape) return t;
  Tensor out = make_empty(shape, t.dtype());
  copy_into(out, t);
  return out;
}

// Softmax along the middle dim of a contiguous [outer, n, inner] block. Work items are
// (outer index, block of up to kBlock inner columns): each item walks the softmax dim once
// per pass with unit-stride inner loops.
template <class T>
void softmax_middle(const T* x, T* y, int64_t outer, int64_t n, int64_t inner, bool log) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  const int64_t per_item = n * std::min(inner, kBlock);
  parallel_for(outer * blocks, std::max<int64_t>(32768 / std::max<int64_t>(per_item, 1), 1),
               [&](int64_t begin, int64_t end) {
                 T m[kBlock];
                 double sum[kBlock];
                 for (int64_t w = begin; w < end; ++w) {
                   const int64_t o = w / blocks, i0 = (w % blocks) * kBlock;
                   const int64_t cols = std::min(kBlock, inner - i0);
                   const T* xb = x + o * n * inner + i0;
                   T* yb = y + o * n * inner + i0;
                   for (int64_t j = 0; j < cols; ++j) {
                     m[j] = -std::numeric_limits<T>::infinity();
                     sum[j] = 0;
                   }
                   for (int64_t d = 0; d < n; ++d)
                     for (int64_t j = 0; j < cols; ++j) m[j] = max_nan(m[j], xb[d * inner + j]);
                   for (int64_t d = 0; d < n; ++d)
                     for (int64_t j = 0; j < cols; ++j) {
                       T e = std::exp(xb[d * inner + j] - m[j]);
                       if (!log) yb[d * inner + j] = e;
                       sum[j] += e;
                     }
                   if (log) {
                     T lse[kBlock];
                     for (int64_t j = 0; j < cols; ++j) lse[j] = static_cast<T>(std::log(sum[j]));
                     for (int64_t d = 0; d < n; ++d)
                       for (int64_t j = 0; j < cols; ++j)
                         yb[d * inner + j] = (xb[d * inner + j] - m[j]) - lse[j];
                   } else {
                     for (int64_t j = 0; j < cols; ++j) sum[j] = 1.0 / sum[j];
                     for (int64_t d = 0; d < n; ++d)
                       for (int64_t j = 0; j < cols; ++j)
                         yb[d * inner + j] = static_cast<T>(yb[d * inner + j] * sum[j]);
                   }
                 }
               });
}

}  // namespace

Tensor cpu::softmax(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  ADJOINT_CHECK(is_floating(x.dtype()), DType, op, "expected a floating tensor, got ", describe(x));
  if (is_reduced(x))
    return narrow_to(softmax(widen(x), dim, log),
                     x.dtype());  // See Note [Reduced-precision kernels]
  const int64_t d = wrap_dim(dim, x.dim(), op);
  const Tensor in = x.is_contiguous() ? x : cast(x, x.dtype());
  Tensor out = make_empty(x.shape(), x.dtype());
  if (x.numel() == 0) return out;
  int64_t outer = 1, n = 1, inner = 1;
  if (x.dim() > 0) {
    n = x.shape()[d];
    for (int64_t i = 0; i < d; ++i) outer *= x.shape()[i];
    for (int64_t i = d + 1; i < x.dim(); ++i) inner *= x.shape()[i];
  }
  dispatch_opmath_floating(x.dtype(), op, [&]<class T>() {
    const T* xs = in.data_ptr<T>();
    T* ys = out.data_ptr<T>();
    if (inner == 1) {
      softmax_last(xs, ys, outer, n, log);
    } else {
      softmax_middle(xs, ys, outer, n, inner, log);
    }
  });
  return out;
}

Tensor cpu::softmax_backward(const Tensor& gy_in, const Tensor& y_in, int64_t dim, bool log) {
  const char* op = log ? "log_softmax_backward" : "softmax_backward";
  ADJOINT_CHECK(is_floating(y_in.dtype()) && gy_in.dtype() == y_in.dtype(), DType, op,
                "expected floating tensors of one dtype, got ", describe(gy_in), " and ",
                describe(y_in));
  if (is_reduced(y_in))  // See Note [Reduced-precision kernels]
    return narrow_to(softmax_backward(widen(gy_in), widen(y_in), dim, log), y_in.dtype());
  const Shape shape = broadcast_shapes(gy_in.shape(), y_in.shape(), op);
  const int64_t nd = static_cast<int64_t>(shape.size());
  const int64_t d = wrap_dim(dim, nd, op);
  Tensor out = make_empty(shape, y_in.dtype());
  if (out.numel() == 0) return out;
  const Tensor gy = contiguous_as(gy_in, shape);
  const Tensor y = contiguous_as(y_in, shape);
  int64_t outer = 1, n = 1, inner = 1;
  if (nd > 0) {
    n = shape[d];
    for (int64_t i = 0; i < d; ++i) outer *= shape[i];
    for (int64_t i = d + 1; i < nd; ++i) inner *= shape[i];
  }
  dispatch_opmath_floating(y.dtype(), op, [&]<class T>() {
    const T* g = gy.data_ptr<T>();
    const T* ys = y.data_ptr<T>();
    T* o = out.data_ptr<T>();
    if (inner == 1) {
      softmax_backward_last(g, ys, o, outer, n, log);
    } else {
      softmax_backward_middle(g, ys, o, outer, n, inner, log);
    }
  });
  return out;
}

}  // namespace adjoint::kernels
