// Argument checks shared by the solvers (cg, gmres, linear_solve, fixed_point, root, odeint):
// a tolerance or an iteration count that cannot mean anything is refused up front, naming the
// solver and the value, instead of surfacing later as non-convergence or a blamed operator.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "adjoint/error.h"
#include "adjoint/implicit.h"

namespace adjoint::detail {

/// A tolerance must be finite and >= 0 (NaN fails both comparisons; inf would accept anything).
inline void check_tolerance(const char* op, const std::string& name, double value) {
  ADJOINT_CHECK(std::isfinite(value) && value >= 0, Value, op, name,
                " must be finite and >= 0, got ", value);
}
inline void check_tolerance(const char* op, const std::string& name,
                            const std::optional<double>& value) {
  if (value) check_tolerance(op, name, *value);
}

/// An iteration or step budget must be >= `least`.
inline void check_count(const char* op, const std::string& name, int64_t value, int64_t least) {
  ADJOINT_CHECK(value >= least, Value, op, name, " must be >= ", least, ", got ", value);
}

/// `prefix` names where the options sit when they are part of larger ones ("linear.krylov.").
inline void check_krylov_options(const char* op, const KrylovOptions& o,
                                 const std::string& prefix = "") {
  check_tolerance(op, prefix + "rtol", o.rtol);
  check_tolerance(op, prefix + "atol", o.atol);
  check_count(op, prefix + "max_iters", o.max_iters, 0);
  check_count(op, prefix + "restart", o.restart, 1);
}

}  // namespace adjoint::detail
