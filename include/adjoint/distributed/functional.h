// Differentiable collectives for model-parallel code: out-of-place, recorded in the graph,
// with VJP and JVP rules. The convention is the global one: the loss is the sum of every
// rank's loss, so the VJP of all_reduce(sum) is the all_reduce of the cotangents, and
// all_gather and reduce_scatter are each other's VJPs (docs/distributed.md).
#pragma once

#include "adjoint/distributed/process_group.h"

namespace adjoint::dist {

// Every rank must call these in the same order, and, because their backward and forward-mode
// rules are collectives too, every rank must also run backward through them (a zero cotangent
// is fine) and carry tangents at the same dual levels. `group` null means default_group().

/// y = op over ranks of x on every rank. Sum: x̄ = all_reduce(ȳ, sum), ẏ = all_reduce(ẋ, sum).
/// Average: both with average. Max: the cotangent goes to the ranks holding the maximum,
/// split evenly among ties (as amax does), and the tangent is their tangents' mean.
Tensor all_reduce(const Tensor& x, ReduceOp op = ReduceOp::Sum, ProcessGroup* group = nullptr);
/// The ranks' x [n, ...] stacked along dim 0: [world * n, ...] (a 0-d x counts as [1]).
/// x̄ = reduce_scatter(ȳ, sum); ẏ = all_gather(ẋ).
Tensor all_gather(const Tensor& x, ProcessGroup* group = nullptr);
/// Rank r's block [n, ...] of the reduction of the ranks' x [world * n, ...]. Sum and Average
/// only under autograd: x̄ = all_gather(ȳ) (divided by world for Average); ẏ = reduce_scatter(ẋ).
Tensor reduce_scatter(const Tensor& x, ReduceOp op = ReduceOp::Sum, ProcessGroup* group = nullptr);
/// root's x on every rank. x̄ = the sum of all ranks' ȳ on root, zero elsewhere; ẏ = broadcast(ẋ).
Tensor broadcast(const Tensor& x, int root = 0, ProcessGroup* group = nullptr);

}  // namespace adjoint::dist
