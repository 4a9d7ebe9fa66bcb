// A Scalar converted to the element type of a tensor, as PyTorch converts the value of fill_,
// full and masked_fill: an integer type truncates fractions but refuses NaN, infinities and
// values outside its range (a C++ cast of those is undefined behaviour, in practice INT64_MIN);
// float32, float16 and bfloat16 refuse finite values that round to an infinity (inf and NaN are
// kept); bool takes any value, nonzero being true.
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "adjoint/dtype.h"
#include "adjoint/scalar.h"

namespace adjoint::detail {

/// Whether a double converts to int64 without overflow (false for NaN and infinities).
inline bool fits_int64(double v) { return v >= -0x1p63 && v < 0x1p63; }

/// Throws the Value error "[op] value v cannot be converted to dtype without overflow".
[[noreturn]] void throw_scalar_overflow(Scalar value, DType dtype, const char* op);

template <class T>
T scalar_to(Scalar value, const char* op) {
  const bool floating = value.is_floating();
  if constexpr (std::is_same_v<T, bool>) {
    return floating ? value.to_double() != 0 : value.to_int() != 0;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    if (!floating) return value.to_int();
    const double v = value.to_double();
    if (!fits_int64(v)) [[unlikely]]
      throw_scalar_overflow(value, DType::Int64, op);
    return static_cast<int64_t>(v);
  } else if constexpr (std::is_integral_v<T>) {  // uint8, int8, int16, int32
    const int64_t v = scalar_to<int64_t>(value, op);
    if (v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) [[unlikely]]
      throw_scalar_overflow(value, dtype_of_v<T>, op);
    return static_cast<T>(v);
  } else if constexpr (std::is_same_v<T, float>) {
    if (!floating) return static_cast<float>(value.to_int());
    const double v = value.to_double();
    if (std::isfinite(v) && std::abs(v) > FLT_MAX) [[unlikely]]
      throw_scalar_overflow(value, DType::Float32, op);
    return static_cast<float>(v);
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    // Through float32, as PyTorch converts a double to at::Half and at::BFloat16.
    const double v = floating ? value.to_double() : static_cast<double>(value.to_int());
    const T r(static_cast<float>(v));
    if (std::isfinite(v) && std::isinf(static_cast<float>(r))) [[unlikely]]
      throw_scalar_overflow(value, dtype_of_v<T>, op);
    return r;
  } else {
    static_assert(std::is_same_v<T, double>);
    return floating ? value.to_double() : static_cast<double>(value.to_int());
  }
}

}  // namespace adjoint::detail
