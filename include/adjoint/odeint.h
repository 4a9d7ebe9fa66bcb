// odeint: differentiable ODE solutions y' = f(t, y, params), by fixed-step RK4 or adaptive
// Dormand-Prince 5(4), with gradients three ways: backprop through the steps, the continuous
// adjoint method (torchdiffeq's odeint_adjoint) and binomial checkpointing (checkpoint_loop).
// See docs/implicit-and-odes.md for the math and a comparison of the three.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint {

/// dy/dt at time t. Tensors that need gradients must come in through `params`, not be
/// captured: the adjoint and checkpointed gradients re-run f on params of their own.
using VectorField =
    std::function<Tensor(double t, const Tensor& y, const std::vector<Tensor>& params)>;

enum class OdeMethod {
  RK4,    ///< classic 4th-order Runge-Kutta with steps of at most step_size
  Dopri5  ///< Dormand-Prince 5(4), adaptive: error per step within atol + rtol |y|
};

enum class OdeGradient {
  Backprop,   ///< record every step: memory O(steps), the exact gradient of the discrete solve
  Adjoint,    ///< solve a backward ODE for the adjoint state: memory O(1) in steps
  Checkpoint  ///< RK4 only: checkpoint_loop per output interval, `snapshots` states each
};

/// Counts from the last odeint call (and, for the adjoint, its backward pass).
struct OdeStats {
  int64_t steps = 0;           ///< accepted steps of the forward solve
  int64_t rejected = 0;        ///< rejected steps (Dopri5)
  int64_t evals = 0;           ///< calls of f in the forward solve
  int64_t backward_steps = 0;  ///< accepted steps of the adjoint's backward solve
  int64_t backward_rejected = 0;
  int64_t backward_evals = 0;
};

struct OdeOptions {
  OdeMethod method = OdeMethod::Dopri5;
  OdeGradient gradient = OdeGradient::Backprop;
  /// RK4: the largest step (required, positive and finite; each output interval is cut into
  /// equal steps no longer, at most 2^40 of them). Dopri5: the first step, 0 to choose it
  /// automatically (Hairer, Norsett and Wanner II.4).
  double step_size = 0;
  double rtol = 1e-6;
  double atol = 1e-9;
  /// Dopri5: steps (accepted and rejected) per solve before giving up with an error.
  int64_t max_steps = 100000;
  /// Checkpoint: states held per output interval (checkpoint_loop's snapshots).
  int64_t snapshots = 10;
  /// Filled if set (shared, as the adjoint's backward fills it later).
  std::shared_ptr<OdeStats> stats;
};

/// The solution at the times t (1-D, strictly increasing; t[0] is the time of y0), stacked:
/// [len(t), *y0.shape], with row 0 equal to y0. Differentiable with respect to y0 and params
/// (all floating) by options.gradient; not with respect to t. Errors (adjoint::Error naming
/// "odeint", shapes and dtypes): non-floating y0 or params, a non-finite y0, t not 1-D, not
/// finite or not increasing, rtol or atol negative or not finite, f returning another shape
/// or dtype, RK4 without a positive finite step_size or needing more than 2^40 steps in one
/// interval, Checkpoint with Dopri5, Dopri5 exceeding max_steps or its step size underflowing,
/// a solution that becomes inf or NaN. Forward mode alone (jvp)
/// carries tangents through the steps whatever the gradient. The adjoint's backward has no
/// tangents and no double backward (hvp or create_graph through it is NotImplemented);
/// Backprop composes with every transform, as any ops do.
Tensor odeint(const VectorField& f, const Tensor& y0, const Tensor& t,
              const std::vector<Tensor>& params = {}, const OdeOptions& options = {});

}  // namespace adjoint
