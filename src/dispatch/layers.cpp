// The layers of the dispatch stack (Note [The dispatch stack] in layer.h), top to bottom.
#include <array>

#include "core/op_tracer.h"
#include "dispatch/layer.h"
#include "dispatch/op_cache.h"
#include "dispatch/op_observer.h"
#include "vmap/batched.h"

namespace adjoint::detail {
namespace {

// Converts the floating inputs as the op's policy asks (src/dispatch/autocast.h), with
// recorded casts, so the layers below see (and Autograd records) the converted call.
class AutocastLayer final : public DispatchLayer {
 public:
  Tensor run(OpCall& call) override {
    if (const AutocastPolicy policy = call.autocast_policy(); policy != AutocastPolicy::Follow)
      for (Tensor& x : call.inputs()) x = autocast_input(x, policy);
    return call.next(Layer::Autocast);
  }
};

// While `compile` traces a function, each call is recorded into its graph (Note [Tracing] in
// src/compile/trace.cpp). It sits below Autocast, so the graph holds the casts autocast made,
// and above Autograd, so that the trace's recording (for the ahead-of-time backward) happens on
// the tensors the tracer hands on. A call with a batched input is not recorded: its batching
// rule's calls on the physical values come back through the stack and are. Nor is a random
// draw under an open vmap: the Batching layer draws it per example, and that physical draw
// comes back through the stack with vmap off, and is. A factory's result is a constant of the
// graph, not a node (Note [Factories in the stack] in src/ops/factories.cpp). An in-place op
// writes nothing: its out-of-place value is recorded with ops and the tracer takes it as the
// tensor's new value (Note [In-place ops under compile] in src/compile/trace.cpp), except in a
// custom function's forward, which runs eagerly at each replay. A custom function is one node
// that calls it again (Note [Custom functions under compile] in adjoint/autograd.h).
class TraceLayer final : public DispatchLayer {
 public:
  Tensor run(OpCall& call) override {
    if (call.writes_in_place()) {
      if (tls_op_tracer->watching()) return call.next(Layer::Trace);
      const Tensor self = call.inputs()[0];
      tls_op_tracer->record_write(self, call.run_out_of_place(), call.name());
      return self;
    }
    if (call.custom_function()) {
      if (tls_op_tracer->watching()) return call.next(Layer::Trace);
      return tls_op_tracer->record_custom(call);
    }
    if (call.makes_constant()) {
      Tensor t = call.next(Layer::Trace);
      tls_op_tracer->constant_made(t, call.constant_recipe());
      return t;
    }
    for (const Tensor& x : call.inputs())
      if (batch_level(x) != 0) return call.next(Layer::Trace);
    if (tls_mode.vmap_depth != 0 && call.generator() != nullptr) return call.next(Layer::Trace);
    return tls_op_tracer->record(call);
  }
};

// Tells the thread's observer chain (Note [Op observer] in op_observer.cpp) about the op:
// before it runs, its tensors and end once its node and saved tensors are in place, or that
// it failed.
class ObserveLayer final : public DispatchLayer {
 public:
  Tensor run(OpCall& call) override {
    return observe_op(*tls_op_observer, call.name(), call.inputs(),
                      [&] { return call.next(Layer::Observe); });
  }
};

// Reverse and forward mode: the op's own template code (apply.h), since the node it records
// is an OpNode<Op>.
class AutogradLayer final : public DispatchLayer {
 public:
  Tensor run(OpCall& call) override { return call.run_autograd(); }
};

// A checkpointed region logs the op and may keep its result, or hands back the result it kept
// in the first run instead of running the op again (Note [Op log] in src/checkpoint/region.h).
// It sits below Autograd, so a recomputation records its node around the kept result. An
// in-place op passes: its write must happen at each run (the ops of its recorded way are
// logged as any others). So does a custom function: the ops of its forward are logged.
class OpCacheLayer final : public DispatchLayer {
 public:
  Tensor run(OpCall& call) override {
    if (call.writes_in_place() || call.custom_function()) return call.next(Layer::OpCache);
    OpCache& cache = *tls_op_cache;
    if (std::optional<KeptOpResult> kept = cache.before_op(call.name())) {
      call.saved() = std::move(kept->extras);
      call.set_op(kept->op);
      return std::move(kept->output);
    }
    Tensor out = call.next(Layer::OpCache);
    if (cache.after_op(call.name(), out)) cache.keep_op(KeptOpResult{out, call.saved(), call.op()});
    return out;
  }
};

// An input batched by an open vmap sends the op to its batching rule at the highest level
// among the inputs (Note [Batched tensors] in src/vmap/batched.h), and a random draw to its
// draw per example (Note [Random draws in the stack] in src/ops/random.cpp); unbatched calls
// pass on.
class BatchingLayer final : public DispatchLayer {
 public:
  Tensor run(OpCall& call) override {
    if (call.generator() != nullptr) [[unlikely]]
      return call.run_batched_draw();
    if (const int level = top_batch_level(call.inputs(), call.name()))
      return call.run_batching_rule(level);
    return call.next(Layer::Batching);
  }
};

AutocastLayer autocast_layer;
TraceLayer trace_layer;
ObserveLayer observe_layer;
AutogradLayer autograd_layer;
OpCacheLayer op_cache_layer;
BatchingLayer batching_layer;

// Indexed by Layer; the kernel is the call's own.
constexpr std::size_t kLayers = static_cast<std::size_t>(Layer::Kernel);
const std::array<DispatchLayer*, kLayers> layers = {&autocast_layer, &trace_layer,
                                                    &observe_layer,  &autograd_layer,
                                                    &op_cache_layer, &batching_layer};

}  // namespace

Tensor OpCall::run_from(int layer) {
  for (int l = layer; l < static_cast<int>(kLayers); ++l)
    if (active_ & (1u << l)) return layers[static_cast<std::size_t>(l)]->run(*this);
  return run_kernel();
}

}  // namespace adjoint::detail
