// Binomial (Revolve) checkpointing of a long loop: reverse mode through `steps` applications of
// a step function while holding at most `snapshots` states, with the fewest recomputed steps
// (Griewank's binomial schedule). See docs/checkpointing.md.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint {

/// One time step: the state after step `i` from the state before it. `params` are the tensors
/// the step reads that need gradients (passed, not captured: see checkpoint_loop).
using LoopStep = std::function<std::vector<Tensor>(int64_t i, const std::vector<Tensor>& state,
                                                   const std::vector<Tensor>& params)>;

/// The state after `steps` applications of `step` to `initial`, differentiable with respect
/// to `initial` and `params`. The forward pass keeps no graph; it stores at most `snapshots`
/// states (counting `initial`) at the positions of the binomial schedule. backward()
/// recomputes the missing states from the nearest snapshot and runs each step's VJP once,
/// in reverse order. For 10,000 steps and 20 snapshots that is 20 states in memory and about
/// 2.8 extra forward passes (see CheckpointLoopPlan).
///
/// Rules: the step must be deterministic (it is re-run); a tensor it reads that requires
/// grad must come in through `params`: backward throws if the step's graph reaches any other
/// (its gradient would be lost). Double backward (create_graph) and forward mode through the
/// loop are not supported and throw. Throws adjoint::Error ("checkpoint_loop") for
/// steps < 0, snapshots < 1, an empty or undefined state, or a step whose output does not
/// match the state's count, shapes and dtypes.
std::vector<Tensor> checkpoint_loop(const LoopStep& step, const std::vector<Tensor>& initial,
                                    const std::vector<Tensor>& params, int64_t steps,
                                    int64_t snapshots);

/// What checkpoint_loop does for `steps` and `snapshots`, computed from the schedule.
struct CheckpointLoopPlan {
  int64_t steps = 0;
  int64_t snapshots = 0;          ///< states held at most, `initial` included
  int64_t forward_snapshots = 0;  ///< states the forward pass stores besides `initial`
  int64_t backward_advances = 0;  ///< untaped step calls that backward makes to recompute
  int64_t taped_steps = 0;        ///< step calls that record a graph in backward (= steps)
  /// backward_advances / steps: the extra forward passes backward costs.
  double recompute_ratio() const {
    return steps ? static_cast<double>(backward_advances) / static_cast<double>(steps) : 0.0;
  }
};
CheckpointLoopPlan checkpoint_loop_plan(int64_t steps, int64_t snapshots);

}  // namespace adjoint
