// Host transfers on the CPU: its memory is the host's, so a transfer is one memcpy when the
// tensor is contiguous and a strided copy through a contiguous temporary otherwise.
#include <cstring>

#include "backend/device_kernels.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {

void cpu::copy_to_host(const Tensor& x, void* dst) {
  if (x.numel() == 0) return;
  const Tensor c = x.is_contiguous() ? x : cpu::cast(x, x.dtype());
  std::memcpy(dst, c.raw_data(), c.nbytes());
}

void cpu::copy_from_host(const Tensor& x, const void* src) {
  if (x.numel() == 0) return;
  if (x.is_contiguous()) {
    std::memcpy(x.raw_data(), src, x.nbytes());
    return;
  }
  Tensor c = make_empty(x.shape(), x.dtype());
  std::memcpy(c.raw_data(), src, c.nbytes());
  cpu::copy_into(x, c);
}

}  // namespace adjoint::kernels
