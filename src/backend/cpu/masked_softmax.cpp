// kernels::masked_softmax: softmax(masked_fill(x, mask, -inf), dim) in one pass over x, with
// masked entries exactly 0 and a row whose every entry is masked all 0 (the composite would
// give NaN there). Along the last dim each row reads its mask row through the mask's broadcast
// strides (no expanded copy). A row whose unmasked entries are a prefix [0, p), as in every
// row of a causal mask, exponentiates only that prefix and zero-fills the rest, so a causal
// attention softmax does about half the exps and never writes -inf. Other rows go through a
// -inf-filled copy of the row; other dims use the composite kernels.
#include <algorithm>
#include <limits>
#include <vector>

#include "adjoint/error.h"
#include "backend/cpu/opmath.h"
#include "backend/cpu/row_math.h"
#include "backend/device_kernels.h"
#include "backend/kernels.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

// The mask's strides once broadcast to `shape` (0 along broadcast dims).
Shape broadcast_strides(const Tensor& mask, const Shape& shape) {
  const std::size_t nd = shape.size(), md = mask.shape().size();
  Shape strides(nd, 0);
  for (std::size_t i = 0; i < md; ++i) {
    const std::size_t d = nd - md + i;
    strides[d] = mask.shape()[i] == 1 ? 0 : mask.strides()[i];
  }
  return strides;
}

// Length of the unmasked prefix of a mask row when the row is [false]*p + [true]*(n - p),
// else -1.
int64_t unmasked_prefix(const bool* m, int64_t stride, int64_t n) {
  int64_t p = 0;
  while (p < n && !m[p * stride]) ++p;
  for (int64_t j = p; j < n; ++j)
    if (!m[j * stride]) return -1;
  return p;
}

// Masked softmax along the last dim of a contiguous [rows, n] block; mask_row(r) is row r's
// mask and `ms` its element stride.
template <class T, class MaskRow>
void masked_softmax_last(const T* x, T* y, int64_t rows, int64_t n, MaskRow mask_row, int64_t ms) {
  const int64_t grain = std::max<int64_t>(32768 / std::max<int64_t>(n, 1), 1);
  parallel_for(rows, grain, [&](int64_t begin, int64_t end) {
    std::vector<T> filled;  // a row with -inf at its masked entries (non-prefix rows only)
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * n;
      T* yr = y + r * n;
      const bool* m = mask_row(r);
      const int64_t p = unmasked_prefix(m, ms, n);
      if (p >= 0) {
        if (p > 0) softmax_row(xr, yr, p);
        std::fill(yr + p, yr + n, T(0));
        continue;
      }
      filled.resize(n);
      for (int64_t j = 0; j < n; ++j)
        filled[j] = m[j * ms] ? -std::numeric_limits<T>::infinity() : xr[j];
      // Some entry is unmasked (else p would be 0); if all of those are -inf (or one is NaN)
      // the row is NaN, as in the composite.
      softmax_row(filled.data(), yr, n);
      for (int64_t j = 0; j < n; ++j)
        if (m[j * ms]) yr[j] = T(0);  // exactly 0, even where x was NaN
    }
  });
}

}  // namespace

Tensor cpu::masked_softmax(const Tensor& x, const Tensor& mask, int64_t dim) {
  const char* op = "masked_softmax";
  ADJOINT_CHECK(is_floating(x.dtype()), DType, op, "expected a floating tensor, got ", describe(x));
  ADJOINT_CHECK(mask.dtype() == DType::Bool, DType, op, "mask must be bool, got ", describe(mask));
  if (is_reduced(x))  // See Note [Reduced-precision kernels]
    return narrow_to(masked_softmax(widen(x), mask, dim), x.dtype());
  const int64_t nd = x.dim();
  const int64_t d = wrap_dim(dim, nd, op);
  Tensor out = make_empty(x.shape(), x.dtype());
  if (x.numel() == 0) return out;
  if (nd == 0 || d != nd - 1) {
    // Not along the last dim: the composite, then masked entries (and all-masked rows) to 0.
    Tensor neg_inf = make_empty({}, x.dtype());
    fill(neg_inf, -std::numeric_limits<double>::infinity());
    Tensor zero = make_empty({}, x.dtype());
    fill(zero, 0.0);
    return where(mask, zero, softmax(where(mask, neg_inf, x), d, false));
  }
  const Tensor in = x.is_contiguous() ? x : cast(x, x.dtype());
  const Shape& shape = x.shape();
  const Shape ms = broadcast_strides(mask, shape);
  const int64_t n = shape[nd - 1], rows = x.numel() / n;
  const bool* mbase = mask.data_ptr<bool>();
  // Row r's mask: r spelled out over the leading dims, through the mask's strides.
  auto mask_row = [&](int64_t r) {
    int64_t off = 0;
    for (int64_t i = nd - 2; i >= 0; --i) {
      off += (r % shape[i]) * ms[i];
      r /= shape[i];
    }
    return mbase + off;
  };
  dispatch_opmath_floating(x.dtype(), op, [&]<class T>() {
    masked_softmax_last(in.data_ptr<T>(), out.data_ptr<T>(), rows, n, mask_row, ms[nd - 1]);
  });
  return out;
}

}  // namespace adjoint::kernels
