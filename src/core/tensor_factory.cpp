// make_empty and make_view.
#include "core/tensor_factory.h"

#include <algorithm>
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

[[noreturn]] void throw_out_of_memory(const Shape& shape, DType dtype, std::size_t nbytes) {
  throw Error(
      ErrorKind::OutOfMemory, detail::current_op("empty"),
      detail::str("out of memory: cannot allocate ", nbytes, " bytes (", human_bytes(nbytes),
                  ") for a tensor of shape ", shape, " (", dtype, ")"));
}

// The storage for a tensor of `shape`: the allocator's std::bad_alloc becomes an error that
// says which op asked, for what, and how much. The try costs nothing until something throws.
std::shared_ptr<StorageImpl> allocate_storage(const Shape& shape, DType dtype, int64_t numel) {
  const std::size_t nbytes = static_cast<std::size_t>(numel) * itemsize(dtype);
  // More than this machine has can never be met: refused here, as the allocator's bad_alloc
  // would be (a sanitizer build aborts on the system's refusal instead of throwing).
  if (nbytes > (std::size_t{1} << 30)) [[unlikely]] {
    const int64_t memory = physical_memory_bytes();
    if (memory > 0 && nbytes > static_cast<std::size_t>(memory))
      throw_out_of_memory(shape, dtype, nbytes);
  }
  try {
    return detail::make_pooled<StorageImpl>(nbytes);
  } catch (const std::bad_alloc&) {
    throw_out_of_memory(shape, dtype, nbytes);
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

Tensor make_empty(const Shape& shape, DType dtype, Device device) {
  if (device.is_cpu()) return make_empty(shape, dtype);
  // Another device's storage: meta takes no memory; one this build lacks is an error there.
  auto impl = detail::make_pooled<TensorImpl>(nullptr, shape, dtype);
  impl->storage = detail::make_pooled<StorageImpl>(
      static_cast<std::size_t>(impl->numel) * itemsize(dtype), device);
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

Tensor unique_elements(const Tensor& t) {
  if (!has_internal_overlap(t)) return t;
  Shape shape = t.shape();
  for (std::size_t d = 0; d < shape.size(); ++d)
    if (t.strides()[d] == 0) shape[d] = std::min<int64_t>(shape[d], 1);
  return make_view(t, std::move(shape), t.strides(), t.impl()->offset);
}

Tensor repeat_like(const Tensor& u, const Tensor& t) {
  if (u.shape() == t.shape()) return u;
  Shape strides = u.strides();
  for (std::size_t d = 0; d < strides.size(); ++d)
    if (u.shape()[d] != t.shape()[d]) strides[d] = 0;
  return make_view(u, t.shape(), std::move(strides), u.impl()->offset);
}

int64_t physical_memory_bytes() {
  static const int64_t bytes = [] {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : int64_t{0};
  }();
  return bytes;
}

}  // namespace adjoint
