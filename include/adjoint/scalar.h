// Scalar: a number passed to an op beside tensors (x * 2, x + 0.5). It remembers whether it
// was integral, boolean or floating, because type promotion treats those differently.
#pragma once

#include <cstdint>
#include <type_traits>

#include "adjoint/dtype.h"

namespace adjoint {

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
      kind_ = DType::Float64;
      d_ = static_cast<double>(v);
      i_ = static_cast<int64_t>(v);
    }
  }
  double to_double() const { return d_; }
  int64_t to_int() const { return i_; }
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
