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
