// The solvers (cg, gmres, root finding, fixed points, odeint) iterate to tolerances that
// float16 and bfloat16 (3 and 2 significant digits) cannot reach: they refuse them by name.
// Under Autocast the ops inside a solver's function follow their policies as anywhere else.
#pragma once

#include "adjoint/error.h"
#include "adjoint/tensor.h"

namespace adjoint::detail {

inline void check_solver_precision(const char* op, const char* what, const Tensor& t) {
  ADJOINT_CHECK(!t.defined() || !is_reduced_float(t.dtype()), DType, op, what, " is ", describe(t),
                ": the solvers need float32 or float64 (16-bit floats cannot reach their "
                "tolerances); convert with .to(DType::Float32)");
}

}  // namespace adjoint::detail
