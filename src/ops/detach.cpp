// detach(): an op of the stack with nothing to differentiate (Note [detach is an op]).
#include "adjoint/detail/pool.h"
#include "adjoint/error.h"
#include "adjoint/tensor_impl.h"
#include "ops/no_derivative.h"
#include "vmap/batched.h"

namespace adjoint {

// Note [detach is an op]
// x.detach() passes the dispatch stack like every op, so the layers see it: compile records it
// as a node of the graph (its replay makes the alias again), observers and profiles list it,
// meta runs it, and vmap sends it to its batching rule, which detaches the physical value (so
// every level below is detached too, as PyTorch's detach under vmap). Autograd neither records
// a node nor pushes a tangent for it (`differentiable = false`: apply_core and the Autograd
// layer in src/autograd/apply.h skip autograd_step), and tracks no view: the alias shares
// its base's memory and version counter, but an in-place op on it gives the base no history.
// Code that is not an op (the engine, checkpointing, the tracer, the optimizers' state) calls
// detail::detach_alias, the forward, directly.

namespace detail {

Tensor detach_alias(const Tensor& t) {
  if (!t.defined()) return t;
  const TensorImpl& src = *t.impl();
  if (src.batched) [[unlikely]] {
    // Inside vmap: the same example-wise value, detached at every level below too.
    const BatchedValue& b = *src.batched;
    return make_batched(detach_alias(b.value), b.bdim, b.level);
  }
  auto out = make_pooled<TensorImpl>(src.storage, src.shape, src.strides, src.offset, src.dtype);
  out->is_view = true;
  out->inference = src.inference;
  return Tensor(std::move(out));
}

}  // namespace detail

namespace {

struct Detach : detail::NoDerivative<1> {
  static constexpr const char* name = "detach";
  static constexpr bool differentiable = false;  // Note [detach is an op]
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& x) const { return detail::detach_alias(x); }
};

}  // namespace

Tensor Tensor::detach() const {
  ADJOINT_CHECK(defined(), Value, "detach", "called on an undefined tensor");
  return apply(Detach{}, *this);
}

}  // namespace adjoint
