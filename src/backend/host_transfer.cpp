// The streaming helpers of Note [Host transfers]: a contiguous tensor is cut into flat views
// of at most kHostChunkBytes, each copied through one reused host buffer.
#include "backend/host_transfer.h"

#include <algorithm>

namespace adjoint::detail {
namespace {
/// Calls `each(view, bytes)` for the flat chunks of contiguous x in order.
template <class Each>
void for_each_chunk(const Tensor& x, const Each& each) {
  const auto item = static_cast<int64_t>(itemsize(x.dtype()));
  const int64_t per_chunk = std::max<int64_t>(1, static_cast<int64_t>(kHostChunkBytes) / item);
  for (int64_t start = 0; start < x.numel(); start += per_chunk) {
    const int64_t n = std::min(per_chunk, x.numel() - start);
    each(make_view(x, {n}, {1}, x.storage_offset() + start), static_cast<std::size_t>(n * item));
  }
}
}  // namespace

void stream_to_host(const Tensor& x, const std::function<void(const char*, std::size_t)>& sink) {
  const Tensor c = x.is_contiguous() ? x : kernels::cast(x, x.dtype());
  std::vector<char> buffer(std::min(c.nbytes(), kHostChunkBytes));
  for_each_chunk(c, [&](const Tensor& chunk, std::size_t bytes) {
    kernels::copy_to_host(chunk, buffer.data());
    sink(buffer.data(), bytes);
  });
}

void stream_from_host(const Tensor& x, const std::function<void(char*, std::size_t)>& source) {
  ADJOINT_CHECK(x.is_contiguous(), Value, "stream_from_host",
                "fills contiguous tensors only, got strides ", x.strides(), " for shape ",
                x.shape());
  std::vector<char> buffer(std::min(x.nbytes(), kHostChunkBytes));
  for_each_chunk(x, [&](const Tensor& chunk, std::size_t bytes) {
    source(buffer.data(), bytes);
    kernels::copy_from_host(chunk, buffer.data());
  });
}

}  // namespace adjoint::detail
