// Calls a templated lambda with the C++ type of a runtime dtype:
//   dispatch_all(t.dtype(), "sum", [&]<class T>() { ... T ... });
// Adding float16/bfloat16 storage means one more case in each helper below.
#pragma once

#include <cstdint>

#include "adjoint/dtype.h"
#include "adjoint/error.h"

namespace adjoint {

template <class F>
decltype(auto) dispatch_all(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::Bool:
      return f.template operator()<bool>();
    case DType::Int64:
      return f.template operator()<int64_t>();
    case DType::Float32:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
  }
  ADJOINT_CHECK(false, DType, op, "unsupported dtype ", d);
}

/// int64, float32, float64: types with arithmetic.
template <class F>
decltype(auto) dispatch_numeric(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::Int64:
      return f.template operator()<int64_t>();
    case DType::Float32:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
    default:
      break;
  }
  ADJOINT_CHECK(false, DType, op, "expected a numeric dtype (int64, float32, float64), got ", d);
}

template <class F>
decltype(auto) dispatch_floating(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::Float32:
      return f.template operator()<float>();
    case DType::Float64:
      return f.template operator()<double>();
    default:
      break;
  }
  ADJOINT_CHECK(false, DType, op, "expected a floating dtype (float32, float64), got ", d);
}

}  // namespace adjoint
