// Reading and writing a tensor's values from code above the kernels, on any device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <type_traits>
#include <vector>

#include "adjoint/dtype.h"
#include "adjoint/error.h"
#include "backend/kernels.h"
#include "core/tensor_factory.h"

// Note [Host transfers]
// Some code above the kernel table needs a tensor's values in C++: printing, tensor() from a
// std::vector, the boolean mask's count, matrix_exp's choice of degree, a checkpoint's bytes,
// the flags ranks exchange. It used to read the memory directly, which works only where the
// device's memory is the host's. It now goes through two kernels, copy_to_host and
// copy_from_host, which each device implements (the CPU with memcpy, a CUDA backend with
// cudaMemcpy, meta with an error naming the op), and through the helpers below, which size
// the buffers. Large tensors are streamed in chunks of kHostChunkBytes, so a checkpoint of a
// 10 GB tensor never holds a second 10 GB copy on the host. These are plain tensors: no
// autograd, no transform sees the transfer (what reads values for the user, item() and
// to_vector(), checks the transforms first).
namespace adjoint::detail {

inline constexpr std::size_t kHostChunkBytes = std::size_t{4} << 20;

/// Whether a host buffer of T can hold x's elements bit for bit: T's dtype, or uint8_t for
/// bool (std::vector<bool> packs bits).
template <class T>
void check_host_type(const Tensor& x, const char* op) {
  const bool same =
      x.dtype() == dtype_of_v<T> || (std::is_same_v<T, uint8_t> && x.dtype() == DType::Bool);
  ADJOINT_CHECK(same, DType, op, "reads ", dtype_of_v<T>, " values from a ", x.dtype(),
                " tensor (shape ", x.shape(), ")");
}

/// x's values, row-major, in a host vector.
template <class T>
std::vector<T> host_values(const Tensor& x, const char* op) {
  check_host_type<T>(x, op);
  std::vector<T> out(static_cast<std::size_t>(x.numel()));
  kernels::copy_to_host(x, out.data());
  return out;
}

/// Element `flat` (row-major over the shape) of x, copied on its own: a print of a huge
/// expanded tensor reads only the elements it shows.
template <class T>
T host_value(const Tensor& x, int64_t flat, const char* op) {
  check_host_type<T>(x, op);
  int64_t offset = x.storage_offset();
  for (int64_t d = x.dim() - 1; d >= 0; --d) {
    const int64_t n = x.shape()[d];
    offset += (flat % n) * x.strides()[d];
    flat /= n;
  }
  T value{};
  kernels::copy_to_host(make_view(x, {}, {}, offset), &value);
  return value;
}

/// Writes `values` (row-major, x.numel() of them) into x.
template <class T>
void write_host_values(const Tensor& x, std::span<const T> values, const char* op) {
  check_host_type<T>(x, op);
  ADJOINT_CHECK(values.size() == static_cast<std::size_t>(x.numel()), Shape, op, "writes ",
                values.size(), " values into a tensor of ", x.numel(), " (shape ", x.shape(), ")");
  kernels::copy_from_host(x, values.data());
}

/// Hands x's bytes (row-major, x's dtype) to `sink` in chunks of at most kHostChunkBytes.
void stream_to_host(const Tensor& x, const std::function<void(const char*, std::size_t)>& sink);
/// Fills x (contiguous) from `source`, which writes the next n bytes at its pointer.
void stream_from_host(const Tensor& x, const std::function<void(char*, std::size_t)>& source);

}  // namespace adjoint::detail
