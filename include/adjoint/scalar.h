// Scalar: a number passed to an op beside tensors (x * 2, x + 0.5). It remembers whether it
// was integral, boolean or floating, because type promotion treats those differently.
#pragma once

#include <cstdint>
#include <type_traits>

#include "adjoint/dtype.h"

namespace adjoint {

namespace detail {
/// v truncated toward zero; an adjoint::Error (Value) when v is NaN, infinite or outside
/// int64's range, where a C++ cast would be undefined behaviour.
int64_t checked_to_int64(double v);
}  // namespace detail

class Scalar {
 public:
  Scalar() = default;
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Scalar(T v) {  // NOLINT: implicit on purpose, so that `x * 2` reads like math
    if constexpr (std::is_same_v<T, bool>) {
      kind_ = DType::Bool;
      i_ = v;
      d_ = v;
    } else if constexpr (std::is_integral_v<T>) {
      kind_ = DType::Int64;
      i_ = static_cast<int64_t>(v);
      d_ = static_cast<double>(v);
    } else {
      // Only the double is kept: casting it to int64 here would be undefined behaviour for
      // inf, NaN and |v| >= 2^63, which x.div_(0), masked_fill(x, m, -INFINITY) and a NaN
      // gradient norm all make. to_int() converts on demand, checked.
      kind_ = DType::Float64;
      d_ = static_cast<double>(v);
    }
  }
  double to_double() const { return d_; }
  /// The integer value; a floating number is truncated toward zero, and one that no int64
  /// holds (NaN, inf, |v| >= 2^63) throws a Value error.
  int64_t to_int() const { return kind_ == DType::Float64 ? detail::checked_to_int64(d_) : i_; }
  bool is_floating() const { return kind_ == DType::Float64; }
  bool is_integral() const { return kind_ == DType::Int64 || kind_ == DType::Bool; }
  /// Bool, Int64 or Float64: the category this number promotes as.
  DType kind() const { return kind_; }

 private:
  double d_ = 0;
  int64_t i_ = 0;
  DType kind_ = DType::Float64;
};

}  // namespace adjoint
