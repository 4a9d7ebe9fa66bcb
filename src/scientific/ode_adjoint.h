// Pieces odeint's files share: the checked vector field, the plain solve, and the adjoint
// method's entry point (ode_adjoint.cpp).
#pragma once

#include <string>
#include <vector>

#include "adjoint/odeint.h"
#include "scientific/ode_steppers.h"

namespace adjoint::ode_detail {

/// "y0 [2] (float64), params [[3] (float64)]", for error messages.
std::string describe_problem(const Tensor& y0, const std::vector<Tensor>& params);
/// f as a Field over the one-tensor state {y}, checking what it returns. Holds f by reference.
Field make_field(const VectorField& f, const std::vector<Tensor>& params, const char* op);
/// The states at `times` (times[0] is y0's), recorded if grad mode is on.
std::vector<Tensor> solve_plain(const VectorField& f, const Tensor& y0,
                                const std::vector<double>& times, const std::vector<Tensor>& params,
                                const OdeOptions& o, Counts& n);
/// odeint with gradient=Adjoint: [len(times), *y0.shape], differentiable by the adjoint ODE.
Tensor odeint_adjoint(const VectorField& f, const Tensor& y0, const std::vector<double>& times,
                      const std::vector<Tensor>& params, const OdeOptions& o);

}  // namespace adjoint::ode_detail
