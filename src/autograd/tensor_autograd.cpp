// The autograd methods of Tensor: requires_grad, .grad, hooks, retain_grad, backward
// (detach() is an op: src/ops/detach.cpp).
#include <atomic>

#include "adjoint/autograd.h"
#include "adjoint/detail/pool.h"
#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "adjoint/tensor_impl.h"
#include "autograd/accumulate_grad.h"
#include "autograd/apply.h"
#include "autograd/view_tracking.h"
#include "dispatch/stack_events.h"

namespace adjoint {
namespace {
// A view's history is brought up to date first (Note [Views and in-place ops]).
AutogradMeta* meta_of(const Tensor& t) {
  if (!t.defined()) return nullptr;
  detail::refresh_view(t);
  return t.impl()->autograd.get();
}

// The pre-hook behind retain_grad: stores (or adds) the gradient into .grad. As in PyTorch 2,
// it runs after the tensor's other hooks whatever the registration order, so .grad shows what
// they return; register_hook moves it back to the end of the node's hooks.
std::function<Tensor(const Tensor&)> retain_grad_hook(const Tensor& t) {
  std::weak_ptr<TensorImpl> weak = t.impl_ptr();
  return [weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      AutogradMeta& mm = impl->meta();
      if (!mm.grad.defined()) {
        NoGradGuard no_grad;
        mm.grad = detail::detach_alias(g).clone();
      } else {
        mm.grad = mm.grad + g;
      }
    }
    return Tensor();
  };
}
}  // namespace

bool Tensor::requires_grad() const {
  AutogradMeta* m = meta_of(*this);
  return m && m->requires_grad;
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  ADJOINT_CHECK(defined(), Value, "requires_grad_", "called on an undefined tensor");
  AutogradMeta* m = meta_of(*this);
  if (m && m->grad_fn) {
    ADJOINT_CHECK(requires_grad, Autograd, "requires_grad_",
                  "requires_grad can only be turned off on leaf tensors; use detach() to get "
                  "a tensor without history");
    return *this;
  }
  ADJOINT_CHECK(!requires_grad || is_floating(dtype()), DType, "requires_grad_",
                "only floating-point tensors can require gradients, got ", describe(*this));
  // Inside a compiled function the flag is state the graph does not hold: a replay would leave
  // an argument as the caller passed it (a graph break, as in torch.compile).
  if (requires_grad != (m && m->requires_grad))
    detail::check_traceable("requires_grad_",
                            "it changes whether a tensor requires grad, which a replay would not "
                            "do again (set it before calling the function)");
  impl()->meta().requires_grad = requires_grad;
  // A view made a leaf stops following its base (Note [Views and in-place ops]): a history
  // regenerated from the base could reach the leaf's own AccumulateGrad, a reference cycle.
  if (requires_grad) impl()->view_base.reset();
  return *this;
}

bool Tensor::is_leaf() const {
  AutogradMeta* m = meta_of(*this);
  return !m || !m->grad_fn;
}

Tensor Tensor::grad() const {
  // Inside a compiled function: the gradient the trace computed (Note [Calls that are not
  // ops] in src/dispatch/stack_events.h).
  if (std::optional<Tensor> taken = detail::stack_grad(*this)) [[unlikely]]
    return *std::move(taken);
  AutogradMeta* m = meta_of(*this);
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  ADJOINT_CHECK(defined(), Value, "set_grad", "called on an undefined tensor");
  ADJOINT_CHECK(!g.defined() || (g.shape() == shape() && g.dtype() == dtype()), Shape, "set_grad",
                "gradient ", describe(g), " does not match the tensor ", describe(*this));
  if (detail::stack_takes_set_grad(*this, g)) [[unlikely]]
    return;
  // A gradient whose elements share memory (an expanded tensor) would be accumulated into
  // in place, adding to each shared slot several times: keep a copy of it instead.
  bool overlapping = false;
  for (std::size_t d = 0; g.defined() && d < g.shape().size(); ++d)
    overlapping |= g.shape()[d] > 1 && g.strides()[d] == 0;
  impl()->meta().grad = overlapping ? g.contiguous() : g;
}

void Tensor::zero_grad(bool set_to_none) const {
  if (detail::stack_takes_zero_grad(*this, set_to_none)) [[unlikely]]
    return;
  AutogradMeta* m = meta_of(*this);
  if (!m || !m->grad.defined()) return;
  if (set_to_none) {
    m->grad = Tensor();
  } else {
    NoGradGuard no_grad;
    m->grad = detail::detach_alias(m->grad);
    m->grad.zero_();
  }
}

std::shared_ptr<Node> Tensor::grad_fn() const {
  AutogradMeta* m = meta_of(*this);
  return m ? m->grad_fn : nullptr;
}

void Tensor::retain_grad() const {
  detail::check_traceable("retain_grad", "a replay records no node to keep the gradient of");
  ADJOINT_CHECK(requires_grad(), Autograd, "retain_grad",
                "can't retain_grad on a tensor that does not require grad (", describe(*this), ")");
  AutogradMeta& m = impl()->meta();
  if (!m.grad_fn || m.retains_grad) return;  // leaves keep .grad anyway
  m.retains_grad = true;
  m.retain_hook_id = m.grad_fn->add_tensor_pre_hook(m.output_nr, retain_grad_hook(*this));
}

bool Tensor::retains_grad() const {
  AutogradMeta* m = meta_of(*this);
  return m && m->retains_grad;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this},
                     gradient.defined() ? std::vector<Tensor>{gradient} : std::vector<Tensor>{},
                     retain_graph || create_graph, create_graph);
}

namespace {

// Appends `hook` under a fresh id to one of leaf t's hook lists; the handle removes it again
// (while t lives).
template <class Hook>
HookHandle add_leaf_hook(const Tensor& t, std::vector<std::pair<int, Hook>> AutogradMeta::*list,
                         Hook hook) {
  static std::atomic<int> next_id{0};
  const int id = next_id++;
  (t.impl()->meta().*list).emplace_back(id, std::move(hook));
  std::weak_ptr<TensorImpl> weak = t.impl_ptr();
  return HookHandle([weak, list, id] {
    if (auto impl = weak.lock())
      std::erase_if(impl->meta().*list, [id](const auto& h) { return h.first == id; });
  });
}

}  // namespace

HookHandle Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  detail::check_traceable("register_hook",
                          "a replay would not run the hook (register it on the arguments or "
                          "parameters, outside)");
  ADJOINT_CHECK(requires_grad(), Autograd, "register_hook",
                "cannot register a hook on a tensor that does not require grad (", describe(*this),
                ")");
  AutogradMeta& m = impl()->meta();
  if (m.grad_fn) {
    std::weak_ptr<Node> node = m.grad_fn;
    int id = m.grad_fn->add_tensor_pre_hook(m.output_nr, std::move(hook));
    if (m.retains_grad) {  // keep retain_grad's hook last (see retain_grad_hook)
      m.grad_fn->remove_tensor_pre_hook(m.retain_hook_id);
      m.retain_hook_id = m.grad_fn->add_tensor_pre_hook(m.output_nr, retain_grad_hook(*this));
    }
    return HookHandle([node, id] {
      if (auto n = node.lock()) n->remove_tensor_pre_hook(id);
    });
  }
  return add_leaf_hook(*this, &AutogradMeta::leaf_hooks, std::move(hook));
}

HookHandle Tensor::register_post_accumulate_grad_hook(
    std::function<void(const Tensor&)> hook) const {
  detail::check_traceable("register_post_accumulate_grad_hook", "a replay would not register it");
  ADJOINT_CHECK(defined() && requires_grad() && !grad_fn(), Autograd,
                "register_post_accumulate_grad_hook",
                "needs a leaf tensor that requires grad (one whose .grad backward() fills), got ",
                defined() ? describe(*this) : std::string("an undefined tensor"),
                defined() && grad_fn() ? " with a grad_fn" : "");
  return add_leaf_hook(*this, &AutogradMeta::post_accumulate_hooks, std::move(hook));
}

void Tensor::set_data(const Tensor& data) const {
  ADJOINT_CHECK(defined() && data.defined(), Value, "set_data", "got an undefined tensor");
  ADJOINT_CHECK(!grad_fn(), Autograd, "set_data", "only a leaf's data can be replaced, not ",
                describe(*this), " made by ", grad_fn()->name());
  ADJOINT_CHECK(!requires_grad() || is_floating(data.dtype()), DType, "set_data",
                "a tensor that requires grad needs floating data, got ", describe(data));
  TensorImpl* dst = impl();
  const TensorImpl* src = data.impl();
  const bool same_kind = dst->dtype == src->dtype && dst->shape == src->shape;
  dst->storage = src->storage;
  dst->shape = src->shape;
  dst->strides = src->strides;
  dst->offset = src->offset;
  dst->dtype = src->dtype;
  dst->is_view = src->is_view;
  dst->view_base = nullptr;  // a leaf with new data views nothing it could follow
  dst->refresh();
  if (dst->autograd && !same_kind) dst->autograd->grad = Tensor();
  // Tangents are derivatives of the old values: they go with them, at every dual level.
  if (dst->autograd) dst->autograd->tangents.clear();
}

Tensor& Tensor::detach_() {
  AutogradMeta* m = meta_of(*this);
  if (m) {
    m->grad_fn = nullptr;
    m->requires_grad = false;
    m->output_nr = 0;
  }
  return *this;
}

}  // namespace adjoint
