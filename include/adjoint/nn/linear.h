// nn::Linear: the fully connected layer y = x Wᵀ + b, one adjoint::linear op (a single gemm
// with the bias folded in, and no copy of Wᵀ).
#pragma once

#include <cstdint>

#include "adjoint/generator.h"
#include "adjoint/nn/module.h"

namespace adjoint::nn {

/// y = x Wᵀ + b over the last dim of x (any rank >= 1), W of shape [out, in], b of [out].
/// Parameters "weight" and "bias" (absent when with_bias = false). Initialised as libtorch:
/// W and b ~ U(-1/sqrt(in), 1/sqrt(in)), drawn from `gen` (the default generator when null).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool with_bias = true,
         Generator* gen = nullptr);
  /// Throws a Shape error naming nn.Linear when x's last dim is not in_features.
  Tensor forward(const Tensor& x) override;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

  Tensor weight;  ///< [out, in]
  Tensor bias;    ///< [out], undefined without bias

 private:
  int64_t in_, out_;
};

}  // namespace adjoint::nn
