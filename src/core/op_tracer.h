// The hook through which `compile` traces a function (src/compile): the Trace layer of the
// dispatch stack and the few places outside it that make or read tensors (comparisons, random
// factories, item) call the thread's tracer while one is installed. Declared in core so that
// those places can reach it without depending on the compiler above them.
#pragma once

#include <functional>
#include <span>

#include "adjoint/tensor.h"
#include "core/mode_state.h"
#include "core/op_fields.h"

namespace adjoint {
class Generator;
class StorageImpl;
}  // namespace adjoint

namespace adjoint::detail {

class OpCall;  // src/dispatch/layer.h

/// Runs a function that does not go through apply<Op> (a comparison, a random draw) on new
/// inputs: what a traced graph keeps of such a call.
using ExternalFn = std::function<Tensor(std::span<const Tensor>)>;

/// How a call outside the stack is written to a file (export): the key its factory is
/// registered under and the fields it rebuilds the function from (Note [Exporting ops] in
/// op_fields.h). No key: it cannot be written.
struct ExternalExport {
  const char* key = nullptr;
  FieldList fields;
};

/// What `compile` installs while it traces a function (Note [Tracing] in src/compile/trace.cpp).
class OpTracer {
 public:
  virtual ~OpTracer() = default;
  /// The Trace layer: records the call as a node and passes it on.
  virtual Tensor record(OpCall& call) = 0;
  /// An in-place op wrote `value` (the result of the out-of-place op, already recorded) into
  /// `self` (Note [In-place ops under compile] in src/compile/trace.cpp): from here on the
  /// graph reads value where the function reads self, and a write to an argument or a captured
  /// tensor is made again at the end of every replay. Nothing is written while tracing.
  virtual void record_write(const Tensor& self, const Tensor& value, const char* op) = 0;
  /// backward() inside the traced function (Note [Training steps under compile] in
  /// src/compile/trace.cpp): the gradients of `outputs` (seeded with `grad_outputs`, or ones
  /// for scalars when empty) for every argument and captured tensor that requires grad are
  /// recorded as ops, and accumulated into their traced .grad. Nothing is written while tracing.
  virtual void record_backward(std::span<const Tensor> outputs,
                               std::span<const Tensor> grad_outputs, bool create_graph) = 0;
  /// `t.grad()` inside the traced function: the gradient the function wrote (backward,
  /// zero_grad, set_grad), else the caller's, which must be undefined.
  virtual Tensor traced_grad(const Tensor& t) = 0;
  /// `t.set_grad(g)` (undefined g: set to none) inside the traced function; each replay writes
  /// the final .grad into the caller's tensor.
  virtual void set_traced_grad(const Tensor& t, const Tensor& g) = 0;
  /// `t.zero_grad(set_to_none)` inside the traced function: what it leaves (none, or zeros
  /// where the tensor had a gradient), without reading the gradient's values.
  virtual void zero_traced_grad(const Tensor& t, bool set_to_none) = 0;
  /// A side effect that each replay performs again (an optimizer's step): `run` gets `inputs`'
  /// values of that replay; it changes `changes` in place, which the function must not read
  /// afterwards. Not run while tracing.
  virtual void record_effect(const char* name, std::span<const Tensor> inputs,
                             std::span<const Tensor> changes, ExternalFn run) = 0;
  /// The Trace layer, for a custom function's call (Note [Custom functions under compile] in
  /// adjoint/autograd.h): records it as one node that makes it again with
  /// call.custom_replay(), and passes it on, watching (below) while its forward runs.
  virtual Tensor record_custom(OpCall& call) = 0;
  /// While a custom function's forward runs inside record_custom: nothing it does is recorded
  /// or stops the trace (each replay runs it again), except reading a traced tensor that is
  /// not one of its arguments, which a replay could not hand it.
  virtual bool watching() const = 0;
  /// `op` did what a graph cannot hold (read values into C++, wrote in place, registered a
  /// hook, ran a backward), for the reason `why`: the trace stops (a graph break).
  [[noreturn]] virtual void untraceable(const char* op, const char* why) = 0;
  /// A factory made `t` from C++ values alone (zeros, arange, tensor): a constant of the trace.
  /// `recipe` (key "factory"), when the factory gives one, makes it again from its arguments
  /// (constant_from_recipe), so that compile's dynamic sizes can make it at other sizes.
  virtual void constant_made(const Tensor& t, ExternalExport recipe) = 0;
};

/// The thread's tracer (null when nothing is being traced); its layer bit is Layer::Trace.
extern constinit thread_local OpTracer* tls_op_tracer;

inline bool tracing() { return (tls_mode.layers & layer_bit(Layer::Trace)) != 0; }

/// Whether an in-place op is to be recorded as a write (a trace is on, outside a custom
/// function's forward, which runs eagerly at each replay).
inline bool tracing_writes() { return tracing() && !tls_op_tracer->watching(); }

/// Stops a trace at `op` (see OpTracer::untraceable); nothing when not tracing.
inline void check_traceable(const char* op, const char* why) {
  if (tracing() && !tls_op_tracer->watching()) [[unlikely]]
    tls_op_tracer->untraceable(op, why);
}

/// Marks a tensor made from C++ values alone (a mask of a fixed pattern, a fill value) as a
/// constant while tracing, as the public factories do.
inline void note_constant(const Tensor& t, ExternalExport recipe = {}) {
  if (tracing()) [[unlikely]]
    tls_op_tracer->constant_made(t, std::move(recipe));
}

/// The tensor a factory's recipe describes (OpTracer::constant_made; src/ops/factories.cpp).
Tensor constant_from_recipe(const FieldList& fields);

}  // namespace adjoint::detail
