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
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

}  // namespace adjoint
