// AccumulateGrad: the node at the end of every leaf that requires grad; it adds incoming
// gradients into the leaf's .grad.
#pragma once

#include "adjoint/autograd.h"
#include "adjoint/tensor_impl.h"

namespace adjoint {

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : Node(1), leaf_(std::move(leaf)) {}
  std::string name() const override { return "AccumulateGrad"; }
  TensorList apply(TensorList&& grads) override;
  /// Runs the leaf's tensor hooks on `g` in registration order (each may replace it).
  void run_hooks(Tensor& g) const;
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

namespace autograd {

/// The .grad a VJP may add input i's gradient into itself, in place, instead of returning it
/// (returning undefined for it instead): defined only where that is exactly what AccumulateGrad
/// would do (see Note [Adding into .grad in place]). `e` is the input's edge; shape and dtype
/// are the input's.
Tensor grad_to_add_into(const Edge& e, const Shape& shape, DType dtype);

/// While alive, grad_to_add_into may answer for the nodes of backward pass `run` (set by the
/// engine for backward() without create_graph; grad() never writes .grad).
class AddIntoGradScope {
 public:
  explicit AddIntoGradScope(uint64_t run);
  ~AddIntoGradScope();
  AddIntoGradScope(const AddIntoGradScope&) = delete;
  AddIntoGradScope& operator=(const AddIntoGradScope&) = delete;

 private:
  uint64_t prev_;
};

}  // namespace autograd

}  // namespace adjoint
