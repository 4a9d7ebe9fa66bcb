// The checked conversions behind Scalar::to_int and scalar_to (core/scalar_convert.h).
#include "adjoint/scalar.h"
#include "adjoint/error.h"
#include "core/op_scope.h"
#include "core/scalar_convert.h"

namespace adjoint::detail {

int64_t checked_to_int64(double v) {
  if (!fits_int64(v)) [[unlikely]]
    throw_scalar_overflow(Scalar(v), DType::Int64, current_op("Scalar"));
  return static_cast<int64_t>(v);
}

void throw_scalar_overflow(Scalar value, DType dtype, const char* op) {
  throw Error(
      ErrorKind::Value, op,
      str("value ", value.to_double(), " cannot be converted to ", dtype, " without overflow"));
}

}  // namespace adjoint::detail
