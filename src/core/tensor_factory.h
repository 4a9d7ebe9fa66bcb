// Internal helpers to make tensors: fresh contiguous storage, or a view over existing storage.
#pragma once

#include <memory>

#include "adjoint/tensor.h"
#include "adjoint/tensor_impl.h"

namespace adjoint {

/// Uninitialised contiguous tensor. A shape too large to describe is a Value error and memory
/// the allocator cannot give an OutOfMemory error, both naming the current op (op_scope.h).
Tensor make_empty(const Shape& shape, DType dtype);
/// The same on `device`: on meta, a tensor with no memory (docs/devices.md).
Tensor make_empty(const Shape& shape, DType dtype, Device device);
/// An uninitialised contiguous tensor like t: its shape, dtype and device.
inline Tensor make_empty_like(const Tensor& t) {
  return make_empty(t.shape(), t.dtype(), t.device());
}
/// A tensor sharing `base`'s storage with new shape, strides (elements) and offset.
Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset);

/// This machine's physical memory in bytes (0 when unknown): a request for more can never be
/// met, so it is refused as OutOfMemory before it is made (a sanitizer build aborts on a
/// failed operator new instead of throwing std::bad_alloc).
int64_t physical_memory_bytes();

/// Whether some elements of t share one memory location: a dim of size > 1 with stride 0 (an
/// expanded tensor). Writing such a tensor element by element is ambiguous.
inline bool has_internal_overlap(const Tensor& t) {
  if (t.is_contiguous()) return false;
  for (std::size_t d = 0; d < t.shape().size(); ++d)
    if (t.shape()[d] > 1 && t.strides()[d] == 0) return true;
  return false;
}

/// t with every dim of size > 1 and stride 0 (an expand) cut to size 1, so that each element
/// appears once; t itself when it has no such dim. A view without autograd history.
Tensor unique_elements(const Tensor& t);
/// `u` (a result computed from unique_elements(t)) viewed with t's shape again: the dims t
/// repeats get stride 0.
Tensor repeat_like(const Tensor& u, const Tensor& t);

namespace detail {
/// shape's element count, after checking that it and its size in bytes fit int64 (see
/// Note [Tensor size limits]); the error names the current op, else `fallback`.
int64_t checked_numel(const Shape& shape, DType dtype, const char* fallback);
}  // namespace detail

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
