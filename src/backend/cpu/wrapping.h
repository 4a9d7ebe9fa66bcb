// Integer arithmetic that wraps around (two's complement) on overflow, as PyTorch's integer
// tensors do. Signed overflow is undefined behaviour in C++, so for integer types these
// compute in uint64 and convert back (modular since C++20); for floating types they are the
// plain operators. They compile to the same instructions, so loops still vectorise.
#pragma once

#include <cstdint>
#include <type_traits>

namespace adjoint::kernels {

template <class T>
inline constexpr bool kWraps = std::is_integral_v<T> && !std::is_same_v<T, bool>;

template <class T>
inline T add_wrap(T x, T y) {
  if constexpr (kWraps<T>) {
    return static_cast<T>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y));
  } else {
    return x + y;
  }
}

template <class T>
inline T sub_wrap(T x, T y) {
  if constexpr (kWraps<T>) {
    return static_cast<T>(static_cast<uint64_t>(x) - static_cast<uint64_t>(y));
  } else {
    return x - y;
  }
}

template <class T>
inline T mul_wrap(T x, T y) {
  if constexpr (kWraps<T>) {
    return static_cast<T>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y));
  } else {
    return x * y;
  }
}

}  // namespace adjoint::kernels
