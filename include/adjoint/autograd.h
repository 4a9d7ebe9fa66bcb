// The reverse-mode engine's public face: graph nodes, backward and functional grad,
// saved-tensor hooks, custom functions, and forward-mode dual tensors.
#pragma once

#include <any>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "adjoint/detail/pool.h"
#include "adjoint/grad_mode.h"
#include "adjoint/tensor.h"

namespace adjoint {

class Node;
class SavedTensor;  // src/autograd/saved_tensor.h
namespace detail {
struct CreationSite;  // src/autograd/anomaly.h
}  // namespace detail
namespace autograd {
class GraphTask;  // src/autograd/graph_task.h
}  // namespace autograd

/// An input of a node: the node that produced it and which of that node's outputs it was.
struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

/// Short lists every node keeps; their memory comes from the small-object pool.
using EdgeList = std::vector<Edge, detail::PoolAllocator<Edge>>;
using TensorList = std::vector<Tensor, detail::PoolAllocator<Tensor>>;

/// What a backward run tells each node it applies. Passed to Node::apply explicitly: a node
/// learns from it, never from grad mode, whether the ops it runs are being recorded.
struct BackwardRun {
  /// The run records the nodes' ops, so the gradients have a graph of their own.
  bool create_graph = false;
  /// Saved tensors survive the run.
  bool retain_graph = false;
  /// The engine's state for this run (what lets a VJP add a leaf's gradient straight into
  /// .grad: Note [Adding into .grad in place]); null when a node is applied outside the engine.
  const autograd::GraphTask* task = nullptr;
};

/// One recorded operation. apply() maps gradients of its outputs to gradients of its inputs.
class Node : public std::enable_shared_from_this<Node> {
 public:
  explicit Node(uint32_t num_outputs = 1);
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// The op's name followed by "Backward", e.g. "MulBackward".
  virtual std::string name() const = 0;
  /// grads[i]: gradient w.r.t. output i (undefined means zero). Returns one per next edge.
  virtual TensorList apply(TensorList&& grads, const BackwardRun& run) = 0;
  /// Frees saved tensors; a later apply() throws an error naming the op.
  virtual void release_saved() {}
  /// True for the node of a dtype cast (`to`), whose backward only casts the gradient back to
  /// the input's dtype: what lets a VJP add through it into a leaf's .grad (Note [Adding into
  /// .grad through a cast] in accumulate_grad.cpp).
  virtual bool is_dtype_cast() const { return false; }
  /// Calls visit(saved, role, index) for each tensor saved for backward, role "input",
  /// "output" or "saved" (extras); what memory summaries read (memory.h).
  using SavedVisitor = std::function<void(const SavedTensor&, const char* role, std::size_t)>;
  virtual void visit_saved(const SavedVisitor& /*visit*/) const {}

  const EdgeList& next_edges() const { return next_edges_; }
  EdgeList& mutable_next_edges() { return next_edges_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  uint32_t num_outputs() const { return num_outputs_; }

  /// Not known: the node is never pruned from a walk (Note [Pruning grad's walk] in
  /// src/autograd/engine.cpp).
  static constexpr uint32_t kUnknownTopologicalNr = ~uint32_t{0};
  /// The length of the longest path from this node to a node without edges (0 for an
  /// AccumulateGrad), or kUnknownTopologicalNr: a node can only lead to nodes of a smaller
  /// number, which is what lets grad() skip the history its inputs do not depend on.
  uint32_t topological_nr() const { return topological_nr_; }
  /// Sets topological_nr() from the next edges; call once they are all in place. Inline: it
  /// runs for every recorded op.
  void update_topological_nr() {
    uint32_t nr = 0;
    for (const Edge& e : next_edges_) {
      if (!e.node) continue;
      const uint32_t child = e.node->topological_nr_;
      if (child >= kUnknownTopologicalNr - 1) {  // unknown below (or no room to count)
        topological_nr_ = kUnknownTopologicalNr;
        return;
      }
      nr = child + 1 > nr ? child + 1 : nr;
    }
    topological_nr_ = nr;
  }

  /// A hook on the gradient of output `output_nr`, run before apply(); returns its id.
  int add_tensor_pre_hook(uint32_t output_nr, std::function<Tensor(const Tensor&)> hook);
  void remove_tensor_pre_hook(int id);
  /// Runs the pre-hooks of each output on `grads` in registration order.
  void run_tensor_pre_hooks(TensorList& grads);
  bool has_tensor_pre_hooks() const { return !pre_hooks_.empty(); }

  /// Which backward run last claimed this node and where that run keeps its state (run serial
  /// in the high half, slot in the low half). Runs claim it only from runs that have ended,
  /// so a live run's claim stays put (Note [Graph task claims] in src/autograd/graph_task.h).
  std::atomic<uint64_t>& graph_task_claim() const { return graph_task_claim_; }

  /// Where the forward op was called, when anomaly mode was on as it was recorded (anomaly.h);
  /// null otherwise.
  const detail::CreationSite* creation_site() const { return creation_site_.get(); }
  void set_creation_site(std::unique_ptr<detail::CreationSite> site);

 protected:
  EdgeList next_edges_;

 private:
  struct PreHook {
    int id;
    uint32_t output_nr;
    std::function<Tensor(const Tensor&)> fn;
  };
  std::vector<PreHook> pre_hooks_;
  mutable std::atomic<uint64_t> graph_task_claim_{0};
  std::unique_ptr<detail::CreationSite> creation_site_;
  uint64_t sequence_nr_;
  uint32_t num_outputs_;

 protected:
  uint32_t topological_nr_ = kUnknownTopologicalNr;
};

namespace autograd {

/// Accumulates into .grad of the leaves reachable from `outputs`. Each output needs a
/// gradient unless it has one element. retain_graph defaults to create_graph.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              std::optional<bool> retain_graph = std::nullopt, bool create_graph = false);

/// Gradients of `outputs` w.r.t. `inputs`, without touching any .grad. An input the outputs do
/// not depend on is an error unless allow_unused, when its gradient is undefined.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {},
                         std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                         bool allow_unused = false);

/// The edge a gradient for `t` flows along: its grad_fn, or the AccumulateGrad of a leaf.
Edge gradient_edge(const Tensor& t);

/// Runs `callback` once the backward run going on on this thread has run all its nodes (and
/// so every post-accumulate-grad hook), before backward() or grad() returns; callbacks run in
/// the order queued, and one may queue another. All of them run even if one throws; the first
/// error is then rethrown by backward(). A run that fails before its end (a node throws)
/// destroys its queued callbacks without running them: a callback that must clean up holds
/// an object whose destructor does. Only during a run (from a hook or a node): elsewhere it
/// throws. A run nested inside a node has its own queue. PyTorch's queue_callback;
/// data-parallel training waits for its all-reduces there.
void queue_callback(std::function<void()> callback);

}  // namespace autograd

/// Pack/unpack hooks for every tensor an op saves for backward while this guard lives.
/// Nestable and thread-local: the innermost pair applies.
class SavedTensorHooks {
 public:
  using Pack = std::function<std::any(const Tensor&)>;
  using Unpack = std::function<Tensor(const std::any&)>;
  SavedTensorHooks(Pack pack, Unpack unpack);
  ~SavedTensorHooks();
  SavedTensorHooks(const SavedTensorHooks&) = delete;
  SavedTensorHooks& operator=(const SavedTensorHooks&) = delete;
};

// ---------------------------------------------------------------------------------------------
// Custom functions
// ---------------------------------------------------------------------------------------------

/// What a custom function's forward hands to its backward.
class FunctionCtx {
 public:
  FunctionCtx();
  ~FunctionCtx();
  /// Tensors backward will need; unpacking checks they were not modified in place since.
  void save_for_backward(const std::vector<Tensor>& tensors);
  std::vector<Tensor> get_saved() const;
  /// Outputs that have no gradient (indices, masks).
  void mark_non_differentiable(const std::vector<Tensor>& outputs);
  /// Whether input i (counting tensor inputs in order) needs a gradient.
  bool needs_input_grad(std::size_t i) const;
  /// Anything else backward needs (sizes, flags).
  std::unordered_map<std::string, std::any> saved_data;

  struct State;
  State& state() { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

namespace detail {
/// A custom function's backward and jvp (Function<Derived>::backward and ::jvp).
using CustomBackward = std::function<std::vector<Tensor>(FunctionCtx&, std::vector<Tensor>)>;
using CustomJvp = std::function<std::vector<Tensor>(FunctionCtx&, std::vector<Tensor>)>;
void collect_tensors(std::vector<Tensor>& out, const Tensor& t);
void collect_tensors(std::vector<Tensor>& out, const std::vector<Tensor>& ts);
template <class T>
void collect_tensors(std::vector<Tensor>&, const T&) {}

// Note [Custom functions under compile]
// While `compile` traces, a custom function is one node of the graph: its forward is a loop
// over values that a trace could not follow (an iterative solver stops on its residual), so the
// tracer does not look inside it. The node keeps a copy of the call's non-tensor arguments and,
// at each replay, calls the function again on the replay's tensors, through the stack (so vmap,
// jvp and a recording backward of the compiled function meet its rules). Its backward is traced
// by running it, as every op's VJP is. The arguments are copied at the trace, as an op's C++
// parameters are: a replay does not see later changes to them.
using CustomRerun = std::function<Tensor(std::span<const Tensor>)>;

/// One call of a custom function, as Function<Derived>::apply hands it to the dispatch stack
/// (Note [Custom functions in the stack] in src/autograd/function.cpp).
struct CustomFunctionCall {
  std::string name;
  std::shared_ptr<FunctionCtx> ctx;
  /// The tensor arguments, in collect_tensors order.
  std::vector<Tensor> inputs;
  /// The user's forward on these tensors (a layer may have replaced the inputs), with the
  /// call's other arguments; it runs once, below every layer.
  std::function<std::vector<Tensor>(std::span<const Tensor>)> forward;
  CustomBackward backward;
  CustomJvp jvp;
  /// For compile's tracer alone: the call again on a replay's tensors, which copies the other
  /// arguments; null with `why_not` for a call a node cannot hold.
  std::function<CustomRerun()> make_rerun;
  const char* why_not = nullptr;
};
/// Runs the call through the dispatch stack; its outputs.
std::vector<Tensor> call_custom_function(CustomFunctionCall call);

/// What a custom function node keeps of an argument: a tensor's place in the inputs, or a copy.
struct TensorSlot {};
struct TensorListSlot {
  std::size_t size;
};
inline TensorSlot slot_of(const Tensor&) { return {}; }
inline TensorListSlot slot_of(const std::vector<Tensor>& ts) { return {ts.size()}; }
template <class T>
requires(!std::is_same_v<std::decay_t<T>, Tensor> &&
         !std::is_same_v<std::decay_t<T>, std::vector<Tensor>>) std::decay_t<T> slot_of(T&& value) {
  return std::forward<T>(value);
}
/// The argument again, from a replay's tensors (k: the next tensor input).
inline Tensor from_slot(TensorSlot, std::span<const Tensor> in, std::size_t& k) { return in[k++]; }
inline std::vector<Tensor> from_slot(TensorListSlot s, std::span<const Tensor> in, std::size_t& k) {
  std::vector<Tensor> out(in.begin() + static_cast<std::ptrdiff_t>(k),
                          in.begin() + static_cast<std::ptrdiff_t>(k + s.size));
  k += s.size;
  return out;
}
template <class T>
const T& from_slot(const T& value, std::span<const Tensor>, std::size_t&) {
  return value;
}
/// An argument of a custom function's call as its forward gets it: a tensor (or a list of
/// them) from the stack's inputs, anything else as the caller passed it.
template <class T>
decltype(auto) from_arg(T&& value, std::span<const Tensor> in, std::size_t& k) {
  if constexpr (std::is_same_v<std::decay_t<T>, Tensor>) {
    return Tensor(in[k++]);
  } else if constexpr (std::is_same_v<std::decay_t<T>, std::vector<Tensor>>) {
    return from_slot(TensorListSlot{value.size()}, in, k);
  } else {
    return std::forward<T>(value);
  }
}
}  // namespace detail

/// Base for user-defined differentiable functions, in libtorch's style:
///
///   struct Cube : Function<Cube> {
///     static Tensor forward(FunctionCtx& ctx, const Tensor& x) {
///       ctx.save_for_backward({x});
///       return x * x * x;
///     }
///     static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
///       Tensor x = ctx.get_saved()[0];
///       return {g[0] * 3 * x * x};
///     }
///   };
///   Tensor y = Cube::apply(x);
///
/// forward runs without recording and returns a Tensor or std::vector<Tensor>; backward
/// returns one gradient per tensor argument (undefined for none). An optional
///   static std::vector<Tensor> jvp(FunctionCtx&, std::vector<Tensor> tangents)
/// gives forward mode (one tangent per tensor input in, one per output out).
template <class Derived>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args) {
    using Out =
        decltype(Derived::forward(std::declval<FunctionCtx&>(), std::forward<Args>(args)...));
    detail::CustomFunctionCall call;
    call.name = Derived::name();
    call.ctx = std::make_shared<FunctionCtx>();
    (detail::collect_tensors(call.inputs, args), ...);
    // The arguments again with the stack's tensors in their places (the others as they are).
    call.forward = [&args..., ctx = call.ctx.get()](std::span<const Tensor> in) {
      std::size_t k = 0;
      // Braces: the arguments are read left to right, tensors in collect_tensors order.
      std::tuple<decltype(detail::from_arg(std::forward<Args>(args), in, k))...> again{
          detail::from_arg(std::forward<Args>(args), in, k)...};
      return std::apply(
          [ctx](auto&&... a) {
            if constexpr (std::is_same_v<Out, Tensor>) {
              return std::vector<Tensor>{Derived::forward(*ctx, std::forward<decltype(a)>(a)...)};
            } else {
              return std::vector<Tensor>(Derived::forward(*ctx, std::forward<decltype(a)>(a)...));
            }
          },
          std::move(again));
    };
    call.backward = [](FunctionCtx& c, std::vector<Tensor> g) {
      return Derived::backward(c, std::move(g));
    };
    if constexpr (requires(FunctionCtx & c, std::vector<Tensor> t) { Derived::jvp(c, t); }) {
      call.jvp = [](FunctionCtx& c, std::vector<Tensor> t) {
        return Derived::jvp(c, std::move(t));
      };
    }
    using Slots = std::tuple<decltype(detail::slot_of(std::forward<Args>(args)))...>;
    if constexpr (!std::is_same_v<Out, Tensor>) {
      call.why_not = "it returns several tensors, which a node cannot";
    } else if constexpr (!std::is_copy_constructible_v<Slots>) {
      call.why_not = "an argument of it cannot be copied into the graph";
    } else {
      call.make_rerun = [&args...]() -> detail::CustomRerun { return rerun(args...); };
    }
    std::vector<Tensor> outs = detail::call_custom_function(std::move(call));
    if constexpr (std::is_same_v<Out, Tensor>) {
      return outs[0];
    } else {
      return outs;
    }
  }
  /// Override with `static std::string name()` for nicer grad_fn names.
  static std::string name() { return "CustomFunction"; }

 private:
  // What a traced graph's node calls at each replay (Note [Custom functions under compile]):
  // the call again with copies of the non-tensor arguments and the replay's tensors.
  template <class... Args>
  static detail::CustomRerun rerun(const Args&... args) {
    using Slots = std::tuple<decltype(detail::slot_of(args))...>;
    return [slots = Slots{detail::slot_of(args)...}](std::span<const Tensor> in) {
      return std::apply(
          [&](const auto&... slot) {
            std::size_t k = 0;
            // Braces: the slots are read left to right, tensors in collect_tensors order.
            std::tuple<decltype(detail::from_slot(slot, in, k))...> again{
                detail::from_slot(slot, in, k)...};
            return std::apply([](const auto&... a) { return Derived::apply(a...); }, again);
          },
          slots);
    };
  }
};

// ---------------------------------------------------------------------------------------------
// Forward mode
// ---------------------------------------------------------------------------------------------

/// While alive, ops propagate the tangents of dual tensors through their JVP rules. Levels
/// nest: a tangent of an inner level carries its own tangents of the outer levels, so a jvp
/// inside a jvp computes second derivatives. Tangents of a closed level are never read again
/// (they stay in memory until their tensor dies).
class DualLevel {
 public:
  DualLevel();
  ~DualLevel();
  DualLevel(const DualLevel&) = delete;
  DualLevel& operator=(const DualLevel&) = delete;
  /// Unique over the process, never reused.
  uint64_t id() const { return id_; }

 private:
  uint64_t id_;
};

/// A view of `primal` carrying `tangent` (same shape and dtype) at the innermost dual level;
/// the tangents `primal` has at outer levels stay. `primal` itself is left as it is. As in
/// PyTorch, a primal that already has a tangent at this level is an error: for another
/// tangent, make the dual from unpack_dual(primal).first. The tangent is used as is (no copy).
Tensor make_dual(const Tensor& primal, const Tensor& tangent);
/// (primal, tangent) at the innermost dual level; the tangent is undefined when none was
/// attached. The primal keeps its tangents of the outer levels. Throws for an undefined tensor.
std::pair<Tensor, Tensor> unpack_dual(const Tensor& dual);

}  // namespace adjoint
