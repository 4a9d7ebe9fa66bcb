// The dispatch stack: the layers every op call passes through, top to bottom, and the
// type-erased call they see. See Note [The dispatch stack] (docs/architecture.md has the
// picture and how a new transform plugs in).
#pragma once

#include <any>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "adjoint/tensor.h"
#include "backend/fused_program.h"
#include "backend/kernels.h"
#include "core/mode_state.h"
#include "core/op_fields.h"
#include "core/op_tracer.h"
#include "dispatch/autocast.h"

namespace adjoint::detail {

// Note [The dispatch stack]
// apply<Op> hands every differentiable op call to a fixed, ordered stack of layers (PyTorch's
// dispatch keys, functorch's DynamicLayer, JAX's interpreters). Each layer sees the call (an
// OpCall: the op's name and policy, its inputs, what its forward saved, and the op's own
// steps behind virtual functions: kernel, batching rule, autograd), may change it, and passes
// it to the next active layer below with call.next(its layer); the bottom runs the kernel.
// Top to bottom (enum Layer, in src/core/mode_state.h beside the bits):
//   Autocast  converts the inputs by the op's policy              (an Autocast guard is alive)
//   Trace     records the call into the graph `compile` builds     (a function is being traced)
//   Observe   profiles, memory timelines, FLOP counts see the op   (an OpObserver is installed)
//   Autograd  records the node for reverse mode and pushes tangents for forward mode (always)
//   OpCache   a checkpointed region logs the op, or hands back a kept result (region running)
//   Batching  an input batched by vmap sends the op to its batching rule (a vmap is open)
//   Kernel    the op's forward
// A layer that is off costs nothing: ModeState::layers holds one bit per optional layer, set
// by the guard that turns it on, and apply<Op> tests the byte once, masked by the layers the
// op takes part in (layers_for: an op without an autocast policy skips Autocast). When that is
// zero (the eager path), Autograd runs with the kernel directly below it, inlined as before
// the stack existed; otherwise the call is built on the stack and walks the active layers.
//
// Transforms nest by levels, inside their layer: a batching rule computes with ordinary ops
// on the physical values, and those ops enter the stack again from the top, so what lies
// below a vmap (an outer grad, jvp or vmap) happens to them, while a grad or jvp inside the
// vmap recorded its node on the logical values before the rule ran. Each transform's levels
// are handled inside its layer: Batching sends a call to the rule of the highest vmap level
// among its inputs; Autograd pushes tangents at every visible dual level, the innermost last,
// each JVP rule seeing only the levels below its own. That is what makes vmap(grad(f)),
// grad(vmap(f)), jvp(vmap(f)) and vmap(vmap(f)) mean what they mean in JAX.

/// The optional layers a call with this autocast policy takes part in: every one, except
/// that an op autocast leaves alone (AutocastPolicy::Follow, most ops) skips the Autocast
/// layer, so under an Autocast guard it stays on the eager path.
constexpr uint8_t layers_for(AutocastPolicy policy) {
  return policy == AutocastPolicy::Follow ? static_cast<uint8_t>(~layer_bit(Layer::Autocast))
                                          : static_cast<uint8_t>(0xff);
}

using kernels::PointwiseKernel;  // (backend/fused_program.h)

/// A reduction an op computes, for compile's fusion to end a pointwise group with it (an op
/// says so with `ReductionKernel reduction() const`, or with
/// `std::optional<ReductionKernel> reduction(const Shape& input) const` when its dims depend on
/// its input's shape).
struct ReductionKernel {
  kernels::Reduce kind = kernels::Reduce::Sum;
  std::vector<int64_t> dims;  ///< normalized
  bool keepdim = false;
};

/// A value as a graph records it: its shape and dtype (undefined: an optional input left out).
/// Import's shape pass hands these to TracedOp::infer.
struct ValueSpec {
  Shape shape;
  DType dtype = DType::Float32;
  bool defined = true;
};
/// What an op makes of inputs of given specs: the first result's shape, and its dtype where
/// the op's rule knows it.
struct OutputSpec {
  Shape shape;
  std::optional<DType> dtype;
};

/// An op as a traced graph keeps it (src/compile): a copy of the op struct after its forward
/// ran, able to run again on new inputs.
class TracedOp {
 public:
  virtual ~TracedOp() = default;
  virtual const char* name() const = 0;
  /// The forward alone on `inputs` (no layer, no recording); what it saves goes to `extras`.
  virtual Tensor run_kernel(std::span<const Tensor> inputs, std::vector<Tensor>& extras) const = 0;
  /// The whole call through the dispatch stack (recording, tangents, batching rules); an op
  /// of several results (a fused group) puts the others in `extras`.
  virtual Tensor run_dispatched(std::span<const Tensor> inputs,
                                std::vector<Tensor>& extras) const = 0;
  /// The op's elementwise computation when it is a pointwise op (its `fusion()` member).
  virtual std::optional<PointwiseKernel> pointwise() const { return std::nullopt; }
  /// A fused group of ops (compile's fusion), whose further results are not saved tensors.
  virtual bool fused() const { return false; }
  /// What the op runs, as lines under its line in a graph dump (a fused group's program);
  /// empty for an op its name says all of.
  virtual std::string body_text(const std::string& /*indent*/) const { return {}; }
  /// The op's reduction on an input of shape `input` when it is one (its `reduction()` member).
  virtual std::optional<ReductionKernel> reduction(const Shape& /*input*/) const {
    return std::nullopt;
  }
  /// Whether `other` is the same op with the same attributes, so that on the same inputs it
  /// computes the same values (common-subexpression elimination). False when unsure.
  virtual bool same_as(const TracedOp& other) const = 0;
  /// The key the op is registered under for export (Note [Exporting ops] in op_fields.h);
  /// nullptr for an op that cannot be written to a file (a custom autograd function, an op
  /// that holds a tensor).
  virtual const char* export_key() const { return nullptr; }
  /// Its attributes, which the factory registered under export_key() rebuilds it from.
  virtual FieldList export_fields() const { return {}; }
  /// How many inputs run_kernel takes; -1 for a list of any length.
  virtual std::ptrdiff_t arity() const { return -1; }
  /// The generator a random draw advances (null for other ops).
  virtual Generator* generator() const { return nullptr; }
  /// Checks the op's attributes against inputs of these shapes and dtypes, as the public
  /// function checks its arguments, throwing an adjoint::Error naming the op, and gives the
  /// result's spec; nullopt for an op without a static rule, whose kernel checks its inputs
  /// itself. See Note [Checking an imported graph] in src/export/import.cpp.
  virtual std::optional<OutputSpec> infer(std::span<const ValueSpec> /*inputs*/) const {
    return std::nullopt;
  }
};

/// How a traced graph calls a custom function again (OpCall::custom_replay): `run` makes its
/// output from a replay's tensors; null with `why_not` for a call a node cannot hold.
struct CustomReplay {
  ExternalFn run;
  const char* why_not = nullptr;
};

/// One op call as the layers see it. apply<Op> builds it (TypedOpCall in
/// src/autograd/apply.h) only when some optional layer is on.
class OpCall {
 public:
  const char* name() const { return name_; }
  AutocastPolicy autocast_policy() const { return autocast_; }
  /// The inputs; a layer may replace them (autocast converts them) before passing the call on.
  virtual std::span<Tensor> inputs() = 0;
  /// The extra tensors the forward (or the batching rule) saved for backward.
  virtual std::vector<Tensor>& saved() = 0;

  /// Passes the call to the next active layer below `from`, or runs the kernel.
  Tensor next(Layer from) { return run_from(static_cast<int>(from) + 1); }
  /// Runs the call through the active layers from the top.
  Tensor dispatch() { return run_from(0); }

  // The op's own steps, which only its struct knows.
  /// The forward on inputs(), saving into saved().
  virtual Tensor run_kernel() = 0;
  /// The batching rule for inputs batched at vmap level `level`; the result is batched there.
  virtual Tensor run_batching_rule(int level) = 0;
  /// Reverse-mode recording and forward-mode tangents around next(Layer::Autograd).
  virtual Tensor run_autograd() = 0;
  /// The generator a random draw advances; null for every other op (Note [Random draws in the
  /// stack] in src/ops/random.cpp).
  virtual Generator* generator() const = 0;
  /// A random draw under an open vmap: one value per example or one for all, by each level's
  /// randomness option.
  virtual Tensor run_batched_draw() = 0;
  /// Whether the op is a factory, whose result the Trace layer marks a constant of the graph
  /// instead of recording a node (Note [Factories in the stack] in src/ops/factories.cpp).
  virtual bool makes_constant() const = 0;
  /// A factory's recipe for compile's dynamic sizes (OpTracer::constant_made); no key: none.
  virtual ExternalExport constant_recipe() const = 0;
  /// Whether the op writes its first input in place (Note [In-place ops in the stack] in
  /// src/ops/inplace.cpp): the Trace layer records its new value as a write, and a
  /// checkpointed region's OpCache neither logs it nor hands back a kept result for it.
  virtual bool writes_in_place() const = 0;
  /// An in-place op's new value of its first input, computed with ops out of place, in that
  /// input's dtype, writing nothing (for the Trace layer). Only in-place calls are asked.
  virtual Tensor run_out_of_place() = 0;
  /// Whether the call is a custom function's (Note [Custom functions in the stack] in
  /// src/autograd/function.cpp). It makes several results: next() and dispatch() return the
  /// first, and the call keeps them all. The Trace layer records it as one node that calls it
  /// again at each replay; OpCache and Batching hand it to its forward, whose ops they see.
  virtual bool custom_function() const = 0;
  /// A custom function's replay for a traced graph. Only custom function calls are asked.
  virtual CustomReplay custom_replay() = 0;
  /// A copy of the op struct (its attributes, and members its forward set).
  virtual std::any op() const = 0;
  /// Replaces the op struct with a copy made by op() (a kept result's).
  virtual void set_op(const std::any& op) = 0;
  /// The op struct as it stands (after the forward ran), for a traced graph.
  virtual std::shared_ptr<const TracedOp> traced_op() const = 0;

 protected:
  /// `layers`: the optional layers this op takes part in (layers_for).
  OpCall(const char* name, AutocastPolicy autocast, uint8_t layers)
      : name_(name),
        autocast_(autocast),
        active_(static_cast<uint8_t>((tls_mode.layers & layers) | layer_bit(Layer::Autograd))) {}
  ~OpCall() = default;
  OpCall(const OpCall&) = delete;
  OpCall& operator=(const OpCall&) = delete;

 private:
  Tensor run_from(int layer);

  const char* name_;
  AutocastPolicy autocast_;
  uint8_t active_;  // the layers on when the call began (Autograd always)
};

/// A layer of the stack. Layers keep no state of their own: what they act on is the thread's
/// mode (the observer installed, the region running, the vmaps open).
class DispatchLayer {
 public:
  virtual ~DispatchLayer() = default;
  /// Handles the call; call.next(this layer) passes it on.
  virtual Tensor run(OpCall& call) = 0;
};

}  // namespace adjoint::detail
