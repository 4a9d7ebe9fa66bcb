// The integrators behind odeint, over a state that is a list of tensors (the adjoint solves
// the augmented state (y, a, params̄) with the same code): RK4 and Dormand-Prince 5(4). They
// integrate in either direction (t1 < t0 runs backward) and record whatever grad mode says.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint::ode_detail {

using State = std::vector<Tensor>;
using Field = std::function<State(double t, const State& y)>;

struct Counts {
  int64_t steps = 0, rejected = 0, evals = 0;
};

/// Adaptive step control carried from one output interval to the next.
struct Dopri5Control {
  double rtol = 1e-6, atol = 1e-9;
  int64_t max_steps = 100000;
  double h = 0;      ///< the next step's size (0: choose at the first interval)
  std::string what;  ///< names the problem in errors (shapes, dtypes)
};

/// The most RK4 steps one output interval may take (2^40, about 1.1e12: far beyond any run
/// that finishes, and exact in a double, so the count is cast without loss).
constexpr int64_t kMaxRk4Steps = int64_t{1} << 40;

/// Equal steps no longer than max_h that cover [t0, t1]; a Value error naming odeint when
/// that is more than kMaxRk4Steps (or max_h is not positive and finite).
int64_t rk4_substeps(double t0, double t1, double max_h);
/// A Value error naming odeint when a state reached at t1 (from t0) is not finite.
void check_finite_state(const State& y, double t0, double t1, const char* method);
/// One classic RK4 step of size h (negative: backward).
State rk4_step(const Field& f, double t, const State& y, double h, Counts& n);
/// y(t1) from y(t0) by rk4_substeps equal steps; a non-finite y(t1) is an error.
State rk4(const Field& f, State y, double t0, double t1, double max_h, Counts& n);
/// y(t1) from y(t0) by Dormand-Prince 5(4) with step-size control; the last step is cut to
/// land on t1. Throws a Value error naming `op` past max_steps or when the step underflows.
State dopri5(const Field& f, State y, double t0, double t1, Dopri5Control& c, Counts& n,
             const char* op);

}  // namespace adjoint::ode_detail
