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

}  // namespace adjoint
