// AccumulateGrad and gradient_edge.
#include "autograd/accumulate_grad.h"

#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "autograd/apply.h"
#include "autograd/graph_task.h"
#include "autograd/view_tracking.h"
#include "core/mode_state.h"
#include "vmap/batched.h"

namespace adjoint {

void AccumulateGrad::run_hooks(Tensor& g) const {
  if (!g.defined() || !leaf_->autograd) return;
  for (auto& [id, hook] : leaf_->autograd->leaf_hooks) {
    Tensor r = hook(g);
    if (!r.defined()) continue;
    detail::check_hook_result(r, g, "AccumulateGrad (a leaf's .grad)");
    g = std::move(r);
  }
}

void AccumulateGrad::run_post_accumulate_hooks() const {
  if (!leaf_->autograd || leaf_->autograd->post_accumulate_hooks.empty()) return;
  // A copy: a hook may remove itself (or register another) while the list is walked.
  const auto hooks = leaf_->autograd->post_accumulate_hooks;
  const Tensor leaf(leaf_);
  for (const auto& [id, hook] : hooks) hook(leaf);
}

TensorList AccumulateGrad::apply(TensorList&& grads, const BackwardRun& run) {
  Tensor g = std::move(grads[0]);
  if (!g.defined()) {
    // No gradient reached the buffer: none flowed here, or a VJP added it into .grad itself.
    const autograd::GraphTask::Slot* s = run.task ? run.task->find(this) : nullptr;
    if (s && s->added_into) run_post_accumulate_hooks();
    return {};
  }
  // backward() inside vmap: vmap's rule says whether a batched gradient fits the leaf.
  if (g.impl()->batched) [[unlikely]]
    detail::check_grad_fits_leaf(g, Tensor(leaf_));
  AutogradMeta& m = leaf_->meta();
  run_hooks(g);  // outside the lock: a hook is user code and may take its time
  const bool create_graph = run.create_graph;
  std::unique_lock<std::mutex> lock(mutex_);  // See Note [Concurrent backward] in engine.cpp
  if (!m.grad.defined()) {
    // Take the incoming buffer when nothing else can see it; otherwise copy, so that later
    // in-place accumulation cannot write into a tensor the caller holds.
    if (create_graph) {
      m.grad = g;
    } else if (g.impl_ptr().use_count() == 1 && g.impl()->storage.use_count() == 1 &&
               !g.requires_grad() && g.is_contiguous()) {
      m.grad = std::move(g);
    } else {
      NoGradGuard no_grad;
      m.grad = detail::detach_alias(g).clone();
    }
  } else if (create_graph || m.grad.requires_grad()) {
    m.grad = m.grad + g;
  } else {
    NoGradGuard no_grad;
    m.grad.add_(g);
  }
  lock.unlock();  // hooks are user code: .grad is final, and other runs may go on meanwhile
  run_post_accumulate_hooks();
  return {};
}

namespace autograd {
namespace {

// Guards the creation of leaves' AccumulateGrad nodes, striped by leaf so that threads
// recording through different leaves rarely meet.
std::mutex& leaf_lock(const TensorImpl* leaf) {
  static std::mutex stripes[64];
  return stripes[(reinterpret_cast<std::uintptr_t>(leaf) >> 6) % 64];
}

}  // namespace

// Note [Adding into .grad in place]
// A weight's gradient usually ends in AccumulateGrad, which adds it to an existing .grad in
// place (zero_grad(set_to_none = false) keeps .grad between steps). For a product such as
// linear's dW = gᵀ x, BLAS can add into .grad itself (beta = 1): that saves writing dW, then
// reading it and .grad again and writing .grad (on the mlp benchmark, ~7 % of the step). When
// .grad holds zeros (zero_grad(false)) the result is exactly gᵀ x, bitwise what AccumulateGrad
// stores. When it accumulates onto a nonzero .grad, the values are the same sum rounded in
// another order wherever BLAS splits k into blocks (it adds each block's partial product into
// .grad: (.grad + P1) + P2 instead of .grad + (P1 + P2)), a last-bit difference like that
// between two BLAS blockings, and still deterministic. A VJP may do it only where nothing else
// could tell:
// - backward() without create_graph (grad() never writes .grad; create_graph records ops);
// - the edge leads straight to the leaf's AccumulateGrad, and this is the last gradient it
//   will get in this pass with none waiting in its buffer (no fan-in to sum first);
// - no tensor pre-hooks or leaf hooks (they see, and may replace, the gradient) and no
//   forward-mode level (AccumulateGrad would keep the gradient's tangent);
// - .grad is defined, does not require grad, and is a contiguous tensor of the input's shape
//   and dtype.
// The VJP then returns an undefined gradient for that input, so AccumulateGrad does nothing.
// It adds while holding the AccumulateGrad's lock, as AccumulateGrad does (Note [Concurrent
// backward] in engine.cpp).
GradInto grad_to_add_into(const Edge& e, const Shape& shape, DType dtype, const BackwardRun& run) {
  const GraphTask* task = run.task;
  if (!task || !task->options().add_into_grad || run.create_graph || tls_mode.dual_visible != 0 ||
      !e.node)
    return {};
  auto* acc = dynamic_cast<AccumulateGrad*>(e.node.get());
  if (!acc || acc->has_tensor_pre_hooks()) return {};
  const GraphTask::Slot* s = task->find(acc);
  if (!s || s->dependencies != 1 || task->buffer(*s, 0).defined()) return {};
  std::unique_lock<std::mutex> lock(acc->mutex());  // another thread's run may reach the leaf
  const AutogradMeta* m = acc->leaf()->autograd.get();
  if (!m || !m->leaf_hooks.empty() || !m->grad.defined()) return {};
  const Tensor& g = m->grad;
  if (g.requires_grad() || !g.is_contiguous() || g.shape() != shape || g.dtype() != dtype)
    return {};
  return {g, std::move(lock), &s->added_into};
}

// Note [Adding into .grad through a cast]
// Under autocast a float32 weight reaches a matmul as its bfloat16 cast, so the edge of the
// weight leads to the cast's node and then to the leaf: the product's 16-bit gradient is cast
// back (an exact widening) and AccumulateGrad adds it into the float32 .grad. A VJP may do the
// widening and the add in one pass itself where nothing else could tell: the conditions of
// Note [Adding into .grad in place] for the leaf, and for the cast's node, which must be a dtype
// cast with no pre-hooks, used once (this gradient is all it gets) and with one edge. The VJP
// then returns an undefined gradient for the cast, whose node passes nothing on.
GradInto grad_to_add_into_through_cast(const Edge& e, const Shape& shape, const BackwardRun& run) {
  const GraphTask* task = run.task;
  if (!task || !task->options().add_into_grad || !e.node || !e.node->is_dtype_cast() ||
      e.node->has_tensor_pre_hooks() || e.node->next_edges().size() != 1)
    return {};
  const GraphTask::Slot* s = task->find(e.node.get());
  if (!s || s->dependencies != 1 || task->buffer(*s, 0).defined()) return {};
  return grad_to_add_into(e.node->next_edges()[0], shape, DType::Float32, run);
}

Edge gradient_edge(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (!impl) return {};
  detail::refresh_view(t);  // Note [Views and in-place ops]
  if (!impl->autograd) return {};
  AutogradMeta& m = *impl->autograd;
  if (m.grad_fn) return {m.grad_fn, m.output_nr};
  if (!m.requires_grad) return {};
  std::lock_guard<std::mutex> lock(leaf_lock(impl));  // threads may record through one leaf
  std::shared_ptr<Node> acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    m.grad_accumulator = acc;
  }
  return {acc, 0};
}

}  // namespace autograd
}  // namespace adjoint
