// kernels::softmax: numerically stable softmax and log-softmax along one dim of a float tensor.
// Each row subtracts its maximum before exponentiating and sums the exponentials in double.
// Rows (or blocks of columns when the dim is not the last) are split across threads; every
// row is computed by one thread in a fixed order, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <limits>

#include "adjoint/error.h"
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

// Softmax along the last dim of a contiguous [rows, n] block.
template <class T>
void softmax_last(const T* x, T* y, int64_t rows, int64_t n, bool log) {
  parallel_for(rows, std::max<int64_t>(32768 / std::max<int64_t>(n, 1), 1),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   const T* xr = x + r * n;
                   T* yr = y + r * n;
                   T m = -std::numeric_limits<T>::infinity();
                   for (int64_t j = 0; j < n; ++j) m = max_nan(m, xr[j]);
                   double sum = 0;
                   if (log) {
                     for (int64_t j = 0; j < n; ++j) sum += std::exp(xr[j] - m);
                     // (x - m) - log(sum) keeps float32 precision when |m| is large
                     const T lse = static_cast<T>(std::log(sum));
                     for (int64_t j = 0; j < n; ++j) yr[j] = (xr[j] - m) - lse;
                   } else {
                     for (int64_t j = 0; j < n; ++j) {
                       T e = std::exp(xr[j] - m);
                       yr[j] = e;
                       sum += e;
                     }
                     const double inv = 1.0 / sum;
                     for (int64_t j = 0; j < n; ++j) yr[j] = static_cast<T>(yr[j] * inv);
                   }
                 }
               });
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

Tensor softmax(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  ADJOINT_CHECK(is_floating(x.dtype()), DType, op, "expected a floating tensor, got ", describe(x));
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
  dispatch_floating(x.dtype(), op, [&]<class T>() {
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

}  // namespace adjoint::kernels
