// make_empty and make_view.
#include "core/tensor_factory.h"

#include "adjoint/detail/pool.h"
#include "adjoint/error.h"
#include "core/mode_state.h"

namespace adjoint {

Tensor make_empty(const Shape& shape, DType dtype) {
  for (int64_t d : shape)
    ADJOINT_CHECK(d >= 0, Value, "empty", "negative dimension ", d, " in shape ", shape);
  int64_t n = shape.numel();
  auto storage = detail::make_pooled<StorageImpl>(static_cast<std::size_t>(n) * itemsize(dtype));
  auto impl = detail::make_pooled<TensorImpl>(std::move(storage), shape, dtype);
  impl->inference = tls_mode.inference;
  return Tensor(std::move(impl));
}

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset) {
  auto impl = detail::make_pooled<TensorImpl>(base.impl()->storage, std::move(shape),
                                              std::move(strides), offset, base.dtype());
  impl->is_view = true;
  impl->inference = base.impl()->inference;
  return Tensor(std::move(impl));
}

}  // namespace adjoint
