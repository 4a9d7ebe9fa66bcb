// make_empty and make_view.
#include "core/tensor_factory.h"

#include <new>

#include <unistd.h>

#include "adjoint/detail/pool.h"
#include "adjoint/error.h"
#include "core/mode_state.h"
#include "core/op_scope.h"

namespace adjoint {
namespace {

// "4 PiB", "1.5 GiB": the size of a failed request, for people.
std::string human_bytes(std::size_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 6) v /= 1024, ++u;
  return detail::str(v, " ", units[u]);
}

// The storage for a tensor of `shape`: the allocator's std::bad_alloc becomes an error that
// says which op asked, for what, and how much. The try costs nothing until something throws.
std::shared_ptr<StorageImpl> allocate_storage(const Shape& shape, DType dtype, int64_t numel) {
  const std::size_t nbytes = static_cast<std::size_t>(numel) * itemsize(dtype);
  try {
    return detail::make_pooled<StorageImpl>(nbytes);
  } catch (const std::bad_alloc&) {
    throw Error(
        ErrorKind::OutOfMemory, detail::current_op("empty"),
        detail::str("out of memory: cannot allocate ", nbytes, " bytes (", human_bytes(nbytes),
                    ") for a tensor of shape ", shape, " (", dtype, ")"));
  }
}

}  // namespace

Tensor make_empty(const Shape& shape, DType dtype) {
  // The TensorImpl checks the shape first (Note [Tensor size limits]), so the byte count
  // asked of the allocator cannot overflow.
  auto impl = detail::make_pooled<TensorImpl>(nullptr, shape, dtype);
  impl->storage = allocate_storage(impl->shape, dtype, impl->numel);
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

int64_t physical_memory_bytes() {
  static const int64_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{0};
  }();
  return bytes;
}

}  // namespace adjoint
