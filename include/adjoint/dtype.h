// Element types and PyTorch's type promotion. Adding a storage type (float16, bfloat16) means
// a new enumerator, its traits below and a case in the dispatch helpers of src/core/dispatch.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string_view>

namespace adjoint {

enum class DType : uint8_t { Bool, Int64, Float32, Float64 };

inline constexpr DType kDefaultFloat = DType::Float32;

std::size_t itemsize(DType dtype);
std::string_view to_string(DType dtype);
std::ostream& operator<<(std::ostream& os, DType dtype);

inline constexpr bool is_floating(DType d) { return d == DType::Float32 || d == DType::Float64; }
inline constexpr bool is_integral(DType d) { return d == DType::Int64 || d == DType::Bool; }

/// The smallest dtype that holds both (PyTorch's promote_types): bool < int64 < float32 < float64.
DType promote_types(DType a, DType b);

/// Maps a C++ type to its DType (bool, int64_t, float, double).
template <class T>
struct dtype_of;
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::Bool;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::Float64;
};
template <class T>
inline constexpr DType dtype_of_v = dtype_of<T>::value;

}  // namespace adjoint
