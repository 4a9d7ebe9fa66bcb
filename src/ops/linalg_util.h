// Helpers shared by the decomposition and solver ops (src/ops/linalg_*.cpp): argument checks
// that name the op, batch broadcasting, and small differentiable matrix pieces (transpose,
// diagonal, diag_embed, symmetric part) the derivative rules are written with.
#pragma once

#include "adjoint/linalg.h"
#include "core/tensor_factory.h"
#include "ops/common.h"

namespace adjoint::linalg_detail {

/// The last two dims swapped (a view).
inline Tensor mT(const Tensor& x) { return x.transpose(-2, -1); }

/// Throws unless x is a float32 or float64 tensor with at least two dims.
inline void check_matrix(const Tensor& x, const char* op, const char* what = "A") {
  ADJOINT_CHECK(x.defined(), Value, op, what, " is an undefined tensor");
  // LAPACK has no 16-bit routines (nor does torch.linalg on CPU).
  ADJOINT_CHECK(is_floating(x.dtype()) && !is_reduced_float(x.dtype()), DType, op, what,
                " must be float32 or float64, got ", describe(x));
  ADJOINT_CHECK(x.dim() >= 2, Shape, op, what,
                " must be a matrix or a batch of matrices [..., m, n], got ", describe(x));
}

/// check_matrix, and the last two dims equal.
inline void check_square(const Tensor& x, const char* op, const char* what = "A") {
  check_matrix(x, op, what);
  ADJOINT_CHECK(x.size(-1) == x.size(-2), Shape, op, what,
                " must be square (or a batch of square matrices), got ", describe(x));
}

/// Throws unless a and b share a dtype (linalg ops do not promote, as torch.linalg).
inline void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  ADJOINT_CHECK(a.dtype() == b.dtype(), DType, op, "expected A and B of one dtype, got A ",
                describe(a), " and B ", describe(b));
}

/// The leading dims of a [..., m, n] tensor.
inline Shape batch_of(const Tensor& x) {
  Shape s = x.shape();
  s.resize(s.size() - 2);
  return s;
}

/// a [..., m, n] and b [..., r, k] expanded (differentiably) to their common batch dims, or a
/// Shape error naming both when the batch dims do not broadcast or b's rows r differ from a's
/// dim `a_dim` (-1: A X = B as in solve; -2: A X ≈ B as in lstsq).
inline std::pair<Tensor, Tensor> broadcast_batch(const Tensor& a, const Tensor& b, const char* op,
                                                 int64_t a_dim = -1) {
  ADJOINT_CHECK(a.size(a_dim) == b.size(-2), Shape, op, "A has ", a.size(a_dim),
                a_dim == -1 ? " columns" : " rows", " but B has ", b.size(-2), " rows: A ",
                describe(a), ", B ", describe(b));
  const Shape ba = batch_of(a), bb = batch_of(b);
  Shape batch;
  try {
    batch = broadcast_shapes(ba, bb, op);
  } catch (const Error&) {
    ADJOINT_CHECK(false, Shape, op, "the batch dims of A and B do not broadcast: A ", describe(a),
                  ", B ", describe(b));
  }
  auto full = [&](const Tensor& x) {
    if (batch_of(x) == batch) return x;
    Shape s = batch;
    s.push_back(x.size(-2));
    s.push_back(x.size(-1));
    return x.expand(s);
  };
  return {full(a), full(b)};
}

/// The n x n identity in x's dtype.
inline Tensor eye_like(const Tensor& x, int64_t n) {
  return eye(n, std::nullopt, TensorOptions(x.dtype()).device(x.device()));
}

/// The diagonal of each matrix of x [..., n, n], as [..., n] (differentiable).
inline Tensor diagonal(const Tensor& x) { return (x * eye_like(x, x.size(-1))).sum({-1}); }

/// Matrices [..., n, n] with v [..., n] on the diagonal (differentiable).
inline Tensor diag_embed(const Tensor& v) { return v.unsqueeze(-1) * eye_like(v, v.size(-1)); }

/// (x + xᵀ) / 2.
inline Tensor sym(const Tensor& x) { return (x + mT(x)) * 0.5; }

/// A view of t's `len` entries from `start` along `dim` (kernel-level: no autograd), for the
/// forwards that pack several results into one output.
inline Tensor narrow_view(const Tensor& t, int64_t dim, int64_t start, int64_t len) {
  const int64_t d = wrap_dim(dim, t.dim(), "narrow");
  Shape shape = t.shape();
  shape[d] = len;
  return make_view(t, shape, t.strides(), t.storage_offset() + start * t.strides()[d]);
}

/// A view of t with its last two dims swapped (kernel-level: no autograd).
inline Tensor transposed_view(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  const std::size_t n = shape.size();
  std::swap(shape[n - 1], shape[n - 2]);
  std::swap(strides[n - 1], strides[n - 2]);
  return make_view(t, shape, strides, t.storage_offset());
}

/// The contiguous tensor t seen with a new shape of equal size (kernel-level: no autograd).
inline Tensor reshaped_view(const Tensor& t, const Shape& shape) {
  return make_view(t, shape, contiguous_strides(shape), t.storage_offset());
}

}  // namespace adjoint::linalg_detail
