// Calls that are not ops but that a layer of the dispatch stack must see: backward() and the
// .grad accessors. See Note [Calls that are not ops].
#pragma once

#include <optional>
#include <span>

#include "adjoint/tensor.h"
#include "core/op_tracer.h"

namespace adjoint::detail {

// Note [Calls that are not ops]
// backward() runs the engine and t.grad(), set_grad and zero_grad read and write a tensor's
// gradient: none of them makes a tensor by an op, so none passes the layers as an OpCall. But
// inside a function compile traces they must not run: the Trace layer records the backward's
// gradients as ops of the graph and keeps the function's .grad values as its own, written
// into the caller's tensors at each replay (Note [Training steps under compile] in
// src/compile/trace.cpp). The engine and the accessors ask here whether a layer takes the call
// and run it themselves only when none does; today the Trace layer is the one layer that
// takes any (outside a custom function's forward, which runs eagerly at each replay). Each
// test is one thread-local byte, as for ops.

/// Whether a layer took backward() of `outputs` seeded with `seeds` (then the engine must
/// not run).
inline bool stack_takes_backward(std::span<const Tensor> outputs, std::span<const Tensor> seeds,
                                 bool create_graph) {
  if (!tracing_writes()) [[likely]]
    return false;
  tls_op_tracer->record_backward(outputs, seeds, create_graph);
  return true;
}

/// The gradient a layer answers for t.grad(), or nullopt: t's own.
inline std::optional<Tensor> stack_grad(const Tensor& t) {
  if (!tracing_writes()) [[likely]]
    return std::nullopt;
  return tls_op_tracer->traced_grad(t);
}

/// Whether a layer took t.set_grad(g).
inline bool stack_takes_set_grad(const Tensor& t, const Tensor& g) {
  if (!tracing_writes()) [[likely]]
    return false;
  tls_op_tracer->set_traced_grad(t, g);
  return true;
}

/// Whether a layer took t.zero_grad(set_to_none).
inline bool stack_takes_zero_grad(const Tensor& t, bool set_to_none) {
  if (!tracing_writes()) [[likely]]
    return false;
  tls_op_tracer->zero_traced_grad(t, set_to_none);
  return true;
}

}  // namespace adjoint::detail
