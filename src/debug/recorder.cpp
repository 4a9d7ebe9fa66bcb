// GraphRecorder: a thread-local op observer (Note [Op observer] in
// src/dispatch/op_observer.cpp) keeps each op's output and hooks its node; tensor pre-hooks
// on the nodes record backward. Both are mechanisms the engine already has, so recording
// changes nothing on the per-op path while no recorder exists.
#include <exception>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "autograd/accumulate_grad.h"
#include "autograd/apply.h"
#include "debug/graph_walk.h"
#include "debug/recorder.h"

namespace adjoint {
namespace {

// A copy of `t` taken without the copy itself reaching any observer (the recorder's own or a
// memory timeline's): the copy is not an op of the user's program.
Tensor quiet_copy(const Tensor& t) {
  const detail::OpObserverPause quiet;
  NoGradGuard no_grad;
  return detail::detach_alias(t).clone();
}

class Observer final : public detail::OpObserver {
 public:
  explicit Observer(std::weak_ptr<GraphRecorder::Impl> state) : state_(std::move(state)) {
    next_ = detail::tls_op_observer;
  }

  void forward_op_tensors(const char* op, const Tensor* inputs, std::size_t n,
                          const Tensor& out) override {
    OpObserver::forward_op_tensors(op, inputs, n, out);
    std::shared_ptr<GraphRecorder::Impl> s = active_ ? state_.lock() : nullptr;
    std::shared_ptr<Node> node = s && out.defined() ? out.grad_fn() : nullptr;
    if (!node) return;  // nothing recorded: no input needed a gradient
    // Leaves first, so their values are in place before the op that reads them.
    for (std::size_t i = 0; i < n; ++i) {
      const Tensor& x = inputs[i];
      if (x.defined() && x.requires_grad() && x.is_leaf())
        GraphRecorder::Impl::hook_leaf(s, autograd::gradient_edge(x).node);
    }
    Tensor value = quiet_copy(out);
    {
      std::lock_guard lock(s->mu);
      GraphRecorder::Impl::NodeRecord& r = s->record_for(node);
      r.op = op;
      r.value = std::move(value);
      r.forward_index = static_cast<int64_t>(s->forward_order.size());
      s->forward_order.push_back(node.get());
    }
    GraphRecorder::Impl::hook(s, node);
  }

  detail::OpObserver* previous() const { return next_; }
  void deactivate() { active_ = false; }

 private:
  std::weak_ptr<GraphRecorder::Impl> state_;
  bool active_ = true;
};

}  // namespace

void GraphRecorder::Impl::hook(const std::shared_ptr<Impl>& self,
                               const std::shared_ptr<Node>& node) {
  if (!node) return;
  {
    std::lock_guard lock(self->mu);
    NodeRecord& r = self->record_for(node);
    if (r.hooked) return;
    r.hooked = true;
    std::weak_ptr<Impl> weak = self;
    Node* raw = node.get();
    for (uint32_t k = 0; k < node->num_outputs(); ++k) {
      int id = node->add_tensor_pre_hook(k, [weak, raw, k](const Tensor& g) {
        if (auto s = weak.lock()) s->on_grad(raw, k, g);
        return Tensor();  // the gradient goes on unchanged
      });
      self->hook_ids.emplace_back(node, id);
    }
  }
  // A leaf read by this node gets a hook too: see on_grad for why that matters.
  for (const Edge& e : node->next_edges())
    if (dynamic_cast<AccumulateGrad*>(e.node.get())) hook_leaf(self, e.node);
}

void GraphRecorder::Impl::hook_leaf(const std::shared_ptr<Impl>& self,
                                    const std::shared_ptr<Node>& acc) {
  auto* a = dynamic_cast<AccumulateGrad*>(acc.get());
  if (!a) return;
  bool need_value = false;
  {
    std::lock_guard lock(self->mu);
    need_value = !self->record_for(acc).value.defined();
  }
  if (need_value) {
    Tensor value = quiet_copy(Tensor(a->leaf()));
    std::lock_guard lock(self->mu);
    NodeRecord& r = self->record_for(acc);
    if (!r.value.defined()) r.value = std::move(value);
  }
  hook(self, acc);
}

void GraphRecorder::Impl::on_grad(Node* node, uint32_t k, const Tensor& grad) {
  Tensor g = quiet_copy(grad);
  BackwardStep step;
  // The VJP again, on a copy, to show what this node sends to each input: the engine sums
  // what several consumers send into one gradient, so the pieces are seen only here. Applied
  // outside the engine's run (no task), the VJP cannot add into .grad itself (Note [Adding
  // into .grad in place]), and every leaf among the inputs carries a hook besides: this
  // second run changes nothing.
  if (node->num_outputs() == 1 && !dynamic_cast<AccumulateGrad*>(node)) {
    try {
      NoGradGuard no_grad;
      TensorList in;
      in.push_back(g.clone());
      TensorList out = node->apply(std::move(in), BackwardRun{});
      for (const Tensor& t : out) step.vjp.push_back(t.defined() ? quiet_copy(t) : Tensor());
    } catch (const std::exception& e) {
      step.vjp.clear();
      step.vjp_error = e.what();
    }
  }
  std::lock_guard lock(mu);
  // Hooks of one node's outputs run one after another: they share a step.
  if (k > 0 && !steps.empty() && steps.back().node == node && !steps.back().grads_in[k].defined()) {
    steps.back().grads_in[k] = std::move(g);
    return;
  }
  step.node = node;
  step.grads_in.resize(node->num_outputs());
  step.grads_in[k] = std::move(g);
  steps.push_back(std::move(step));
}

GraphRecorder::GraphRecorder() : impl_(std::make_shared<Impl>()) {
  impl_->observer = std::make_unique<Observer>(impl_);
  detail::set_op_observer(impl_->observer.get());
}

GraphRecorder::~GraphRecorder() {
  stop_forward();
  std::lock_guard lock(impl_->mu);
  for (auto& [weak, id] : impl_->hook_ids)
    if (std::shared_ptr<Node> n = weak.lock()) n->remove_tensor_pre_hook(id);
  impl_->hook_ids.clear();
}

void GraphRecorder::stop_forward() {
  if (!impl_->observer) return;
  auto* o = static_cast<Observer*>(impl_->observer.get());
  if (detail::tls_op_observer == o) {
    detail::set_op_observer(o->previous());
  } else {
    // Stopped out of nesting order, or on another thread: an observer installed after this
    // one still calls it, so it stays (forwarding only) for the rest of the thread.
    o->deactivate();
    (void)impl_->observer.release();
    return;
  }
  impl_->observer.reset();
}

void GraphRecorder::watch(const std::vector<Tensor>& outputs) {
  for (Node* n : debug::graph_nodes(outputs, "GraphRecorder.watch")) {
    std::shared_ptr<Node> node = n->shared_from_this();
    if (dynamic_cast<AccumulateGrad*>(n)) {
      Impl::hook_leaf(impl_, node);
    } else {
      Impl::hook(impl_, node);
    }
  }
}

std::size_t GraphRecorder::num_forward_ops() const {
  std::lock_guard lock(impl_->mu);
  return impl_->forward_order.size();
}

std::size_t GraphRecorder::num_backward_steps() const {
  std::lock_guard lock(impl_->mu);
  return impl_->steps.size();
}

}  // namespace adjoint
