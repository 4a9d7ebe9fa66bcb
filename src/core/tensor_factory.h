// Internal helpers to make tensors: fresh contiguous storage, or a view over existing storage.
#pragma once

#include <memory>

#include "adjoint/tensor.h"
#include "adjoint/tensor_impl.h"

namespace adjoint {

/// Uninitialised contiguous tensor.
Tensor make_empty(const Shape& shape, DType dtype);
/// A tensor sharing `base`'s storage with new shape, strides (elements) and offset.
Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset);

}  // namespace adjoint

namespace adjoint {
/// Reshapes a freshly made contiguous tensor in place (a private temporary, not a view).
inline Tensor& reshape_fresh(Tensor& fresh, const Shape& shape) {
  fresh.impl()->shape = shape;
  fresh.impl()->strides = contiguous_strides(shape);
  fresh.impl()->refresh();
  return fresh;
}
}  // namespace adjoint
