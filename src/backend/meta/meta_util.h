// Helpers of the meta kernels: results with a shape and a dtype and no memory.
#pragma once

#include "adjoint/device.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels::meta {

/// A contiguous meta tensor: what every meta kernel returns (the CPU kernels' results are
/// contiguous too, so shapes, dtypes and strides agree).
inline Tensor result(const Shape& shape, DType dtype) { return make_empty(shape, dtype, kMeta); }

/// shape with its last dims replaced by `tail` (the batch dims kept).
inline Shape with_tail(const Shape& shape, std::size_t drop, const Shape& tail) {
  Shape out;
  for (std::size_t i = 0; i + drop < shape.size(); ++i) out.push_back(shape[i]);
  for (int64_t d : tail) out.push_back(d);
  return out;
}

}  // namespace adjoint::kernels::meta
