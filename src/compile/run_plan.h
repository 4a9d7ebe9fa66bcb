// Running a planned graph: straight through the kernels (the replay), or op by op through the
// dispatch stack (under vmap or jvp, and for a backward that records its own graph).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "compile/passes.h"

namespace adjoint::detail {

/// The traced function itself, run eagerly on new inputs (with the static arguments bound).
using EagerFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

/// The forward kernels on the caller's inputs, with no recording; when the plan has a
/// backward and grad mode is on, the outputs get one node that runs it (Note [Compiled
/// backward] in run_plan.cpp), or `eager` for a backward with create_graph.
std::vector<Tensor> run_plan(const std::shared_ptr<const Plan>& plan,
                             const std::vector<Tensor>& inputs, EagerFn eager);

/// Copies the final values of the caller's tensors a graph writes in place (its last outputs,
/// Graph::writes) into those arguments and captured tensors, and drops them from `outs`.
void write_back(const Graph& g, const std::vector<Tensor>& inputs, std::vector<Tensor>& outs);

/// Whether a transform acts on the call (an input batched by vmap, or a tangent of jvp on an
/// input or a captured tensor of g): the graph then runs op by op through the dispatch stack.
bool transformed(std::span<const Tensor> inputs, const Graph* g);

/// The forward ops one by one through the dispatch stack, so that every transform that is on
/// (vmap, jvp, recording for backward) sees them.
std::vector<Tensor> run_plan_dispatched(const Plan& plan, const std::vector<Tensor>& inputs);

}  // namespace adjoint::detail
