// The op observer: the chain of tools (profiles, memory timelines, FLOP counts, graph
// recorders) told about every op call, as the Observe layer of the dispatch stack, and about
// every node the backward engine runs. See Note [Op observer] in op_observer.cpp.
#pragma once

#include <span>
#include <string>

#include "adjoint/autograd.h"
#include "core/mode_state.h"

namespace adjoint::detail {

/// Called around every op that goes through apply<Op> and every node the backward engine
/// runs, on the thread that installed it. See Note [Op observer] in op_observer.cpp. An
/// observer that displaces another passes every call on to it.
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  /// Before the op's forward runs (what profiles time from). An op that throws gets
  /// forward_op_failed instead of after_forward_op.
  virtual void before_forward_op(const char* op) {
    if (next_) next_->before_forward_op(op);
  }
  /// Called just before after_forward_op with the op's `n` inputs (undefined ones included)
  /// and its output: what FLOP counting reads (checkpoint budgets, see Note [FLOP counting]
  /// in src/checkpoint/budget_profile.cpp).
  virtual void forward_op_tensors(const char* op, const Tensor* inputs, std::size_t n,
                                  const Tensor& output) {
    if (next_) next_->forward_op_tensors(op, inputs, n, output);
  }
  /// `op` is Op::name ("exp"); the op's node and saved tensors are in place.
  virtual void after_forward_op(const char* op) {
    if (next_) next_->after_forward_op(op);
  }
  /// Instead of after_forward_op when the op threw (its error is on its way to the caller).
  virtual void forward_op_failed(const char* op) {
    if (next_) next_->forward_op_failed(op);
  }
  /// Before the node's apply (what profiles time from).
  virtual void before_backward_node(const Node& node) {
    if (next_) next_->before_backward_node(node);
  }
  /// Just after the node's apply, with the gradients it returned for its inputs.
  virtual void backward_node_tensors(const Node& node, const TensorList& grads) {
    if (next_) next_->backward_node_tensors(node, grads);
  }
  /// `node` is the node's name() ("ExpBackward"); its saved tensors are freed (unless
  /// retain_graph) and its gradients passed on.
  virtual void after_backward_node(const std::string& node) {
    if (next_) next_->after_backward_node(node);
  }

 protected:
  /// The observer this one displaced from tls_op_observer. Observers compose: each default
  /// above passes the call on to it, and an override calls the base version when done.
  OpObserver* next_ = nullptr;
};

/// The top of the thread's observer chain; set it with set_op_observer.
extern constinit thread_local OpObserver* tls_op_observer;

/// Makes `o` the top of the chain (null: none), with the dispatch stack's Observe layer.
inline void set_op_observer(OpObserver* o) {
  tls_op_observer = o;
  set_layer_active(Layer::Observe, o != nullptr);
}

/// What the Observe layer does around one op: tells `observer`'s chain before `run()` runs,
/// then `inputs` (read once it returned) and its result and the end, or that it failed,
/// whatever threw (an observer of the chain included: a recorder's copy out of memory), so that
/// profiles close what they opened. compile's replay of its kernels, which run below the
/// stack, observes each node with it too.
template <class Run>
Tensor observe_op(OpObserver& observer, const char* op, std::span<const Tensor> inputs, Run&& run) {
  try {
    observer.before_forward_op(op);
    Tensor out = run();
    observer.forward_op_tensors(op, inputs.data(), inputs.size(), out);
    observer.after_forward_op(op);
    return out;
  } catch (...) {
    observer.forward_op_failed(op);
    throw;
  }
}

/// Hides the thread's observers while alive (what runs meanwhile is not an op of the
/// program: a backward node's insides, a tool's own copies and checks) and puts them back.
class OpObserverPause {
 public:
  OpObserverPause() : paused(tls_op_observer) { set_op_observer(nullptr); }
  ~OpObserverPause() { set_op_observer(paused); }
  OpObserverPause(const OpObserverPause&) = delete;
  OpObserverPause& operator=(const OpObserverPause&) = delete;

  OpObserver* const paused;  ///< the observer chain hidden, or null
};

}  // namespace adjoint::detail
