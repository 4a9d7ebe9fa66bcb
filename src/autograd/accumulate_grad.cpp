// AccumulateGrad and gradient_edge.
#include "autograd/accumulate_grad.h"

#include "adjoint/ops.h"
#include "core/mode_state.h"

namespace adjoint {

void AccumulateGrad::run_hooks(Tensor& g) const {
  if (!g.defined() || !leaf_->autograd) return;
  for (auto& [id, hook] : leaf_->autograd->leaf_hooks) {
    Tensor r = hook(g);
    if (r.defined()) g = std::move(r);
  }
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  Tensor g = std::move(grads[0]);
  if (!g.defined()) return {};
  AutogradMeta& m = leaf_->meta();
  run_hooks(g);
  const bool create_graph = tls_mode.grad_enabled;  // the engine sets grad mode to create_graph
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
      m.grad = g.detach().clone();
    }
  } else if (create_graph || m.grad.requires_grad()) {
    m.grad = m.grad + g;
  } else {
    NoGradGuard no_grad;
    m.grad.add_(g);
  }
  return {};
}

namespace autograd {
namespace {
thread_local uint64_t tls_add_into_grad_run = 0;  // the pass that may add into .grad, or 0
}  // namespace

AddIntoGradScope::AddIntoGradScope(uint64_t run) : prev_(tls_add_into_grad_run) {
  tls_add_into_grad_run = run;
}
AddIntoGradScope::~AddIntoGradScope() { tls_add_into_grad_run = prev_; }

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
Tensor grad_to_add_into(const Edge& e, const Shape& shape, DType dtype) {
  if (tls_add_into_grad_run == 0 || tls_mode.grad_enabled || tls_mode.dual_visible != 0 || !e.node)
    return {};
  auto* acc = dynamic_cast<AccumulateGrad*>(e.node.get());
  if (!acc || acc->run_.run_id != tls_add_into_grad_run || acc->run_.dependencies != 1 ||
      acc->run_.buffer.empty() || acc->run_.buffer[0].defined() || acc->has_tensor_pre_hooks())
    return {};
  const AutogradMeta* m = acc->leaf()->autograd.get();
  if (!m || !m->leaf_hooks.empty() || !m->grad.defined()) return {};
  const Tensor& g = m->grad;
  if (g.requires_grad() || !g.is_contiguous() || g.shape() != shape || g.dtype() != dtype)
    return {};
  return g;
}

Edge gradient_edge(const Tensor& t) {
  TensorImpl* impl = t.impl();
  if (!impl || !impl->autograd) return {};
  AutogradMeta& m = *impl->autograd;
  if (m.grad_fn) return {m.grad_fn, m.output_nr};
  if (!m.requires_grad) return {};
  std::shared_ptr<Node> acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    m.grad_accumulator = acc;
  }
  return {acc, 0};
}

}  // namespace autograd
}  // namespace adjoint
