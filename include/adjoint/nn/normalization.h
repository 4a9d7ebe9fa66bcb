// nn::LayerNorm: normalisation over the trailing dims, on the fused adjoint::layer_norm op;
// nn::RMSNorm: Llama's root-mean-square normalisation, on the rms_norm composite.
#pragma once

#include <cstdint>

#include "adjoint/nn/module.h"
#include "adjoint/shape.h"

namespace adjoint::nn {

/// y = (x - mean) / sqrt(var + eps) * weight + bias over the trailing `normalized_shape`
/// dims (biased variance, as PyTorch). With affine, parameters "weight" (ones) and "bias"
/// (zeros) of that shape; without, none.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool affine = true);
  /// The usual case: normalise over one last dim of size `dim`.
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool affine = true);
  /// Throws a Shape error naming nn.LayerNorm when x does not end in the normalized shape.
  Tensor forward(const Tensor& x) override;

  const Shape& normalized_shape() const { return shape_; }
  double eps() const { return eps_; }

  Tensor weight;  ///< undefined without affine
  Tensor bias;    ///< undefined without affine

 private:
  Shape shape_;
  double eps_;
};

/// y = x / sqrt(mean(x², last dim) + eps) * weight over the last dim (size `dim`), as
/// torch.nn.RMSNorm and Llama's; parameter "weight" [dim], ones. No bias, no mean subtracted.
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6);
  /// Throws a Shape error naming nn.RMSNorm when x's last dim is not `dim`.
  Tensor forward(const Tensor& x) override;

  int64_t dim() const { return dim_; }
  double eps() const { return eps_; }

  Tensor weight;  ///< [dim]

 private:
  int64_t dim_;
  double eps_;
};

}  // namespace adjoint::nn
