// Widening float16/bfloat16 operands to float32 at a kernel's entry, so that the kernels that
// compute are written (and vectorised) once, for the dtypes they compute in.
#pragma once

#include <utility>

#include "adjoint/dtype.h"
#include "adjoint/tensor.h"
#include "adjoint/tensor_impl.h"
#include "backend/kernels.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {

// Note [Reduced-precision kernels]
// float16 and bfloat16 are storage types: a kernel loads them into float32 (their "opmath"
// dtype in the dtype table), computes and rounds the result once on the way out, as PyTorch's
// CPU kernels do. Here that happens at tensor granularity: a computing kernel given a 16-bit
// operand converts its operands with the vectorised conversions of core/half_convert.h, runs its
// float32 code (SIMD paths included) and converts the result back. The values are those of an
// element-by-element load-compute-store; the cost is one extra pass over each operand, paid only
// by the 16-bit dtypes. Data-movement kernels (copy, fill, where, index_select, gather) handle the
// 16-bit types natively, and the 16-bit matmuls have their own kernels (gemm16.h).

//
// The integers narrower than int64 (uint8, int8, int16, int32) are storage types the same way:
// their opmath dtype is int64, so the kernels that compute widen them here too, and narrowing
// the int64 result back wraps as the narrow type's own arithmetic would.

// Read off the impl: this check runs at every kernel entry, float32 ones included.
/// Whether t is stored narrower than kernels compute (a 16-bit float or a narrow integer).
inline bool is_reduced(const Tensor& t) {
  const TensorImpl* impl = t.impl();
  return impl && is_storage_only(impl->dtype);
}
/// Whether t is float16 or bfloat16 (the kernels with 16-bit paths of their own).
inline bool is_reduced_floating(const Tensor& t) {
  const TensorImpl* impl = t.impl();
  return impl && is_reduced_float(impl->dtype);
}

/// t converted to its opmath dtype (float32, int64) if it is stored narrower, else t itself.
inline Tensor widen(const Tensor& t) {
  return is_reduced(t) ? cast(t, opmath_dtype(t.dtype())) : t;
}

/// widen for kernels that read any strides (the reductions): an expanded t converts its unique
/// elements only and stays expanded, so a reduction of a huge expand reads each element once
/// (Note [Reducing repeated elements] in reduce.cpp).
inline Tensor widen_keeping_repeats(const Tensor& t) {
  if (!is_reduced(t)) return t;
  return repeat_like(cast(unique_elements(t), opmath_dtype(t.dtype())), t);
}

/// t with its last two dims swapped, as a view (no data moves).
inline Tensor swap_last_dims(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  const std::size_t d = shape.size();
  std::swap(shape[d - 1], shape[d - 2]);
  std::swap(strides[d - 1], strides[d - 2]);
  return make_view(t, std::move(shape), std::move(strides), t.impl()->offset);
}

/// widen for a matrix product's operand. Converting a transposed view element by element walks
/// memory with a stride, 30 to 40 times slower than a contiguous pass (a [2048, 1024] bfloat16
/// matrix: 3 ms against 0.1 ms), and a linear layer's weight gradient multiplies by one (gᵀ x).
/// So the contiguous matrix it views is widened instead and handed on transposed again, which
/// the float32 product takes as it is (a BLAS transpose flag). The same values either way.
inline Tensor widen_operand(const Tensor& t) {
  if (!is_reduced(t) || t.dim() < 2 || t.is_contiguous()) return widen(t);
  const Tensor transposed = swap_last_dims(t);
  if (!transposed.is_contiguous()) return widen(t);
  return swap_last_dims(widen(transposed));
}

/// t converted to dtype when it differs (undefined stays undefined).
inline Tensor narrow_to(const Tensor& t, DType dtype) {
  return !t.defined() || t.dtype() == dtype ? t : cast(t, dtype);
}

}  // namespace adjoint::kernels
