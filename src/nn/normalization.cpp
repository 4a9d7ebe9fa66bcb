// nn::LayerNorm: affine parameters initialised to ones and zeros, and a forward on the fused
// layer_norm op that names the module when the input's trailing dims do not match; RMSNorm on
// the rms_norm composite.
#include "adjoint/nn/normalization.h"

#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "adjoint/transformer_ops.h"

namespace adjoint::nn {

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool affine)
    : Module("LayerNorm"), shape_(std::move(normalized_shape)), eps_(eps) {
  ADJOINT_CHECK(!shape_.empty(), Shape, "nn.LayerNorm",
                "normalized_shape needs at least one dim, got ", shape_);
  for (int64_t s : shape_)
    ADJOINT_CHECK(s >= 0, Value, "nn.LayerNorm", "invalid normalized_shape ", shape_);
  ADJOINT_CHECK(eps >= 0, Value, "nn.LayerNorm", "eps must be non-negative, got ", eps);
  if (affine) {
    weight = register_parameter("weight", ones(shape_));
    bias = register_parameter("bias", zeros(shape_));
  }
}

LayerNorm::LayerNorm(int64_t dim, double eps, bool affine) : LayerNorm(Shape{dim}, eps, affine) {}

Tensor LayerNorm::forward(const Tensor& x) {
  ADJOINT_CHECK(x.defined(), Value, "nn.LayerNorm", "got an undefined input");
  const std::size_t k = shape_.size();
  bool match = k <= static_cast<std::size_t>(x.dim());
  for (std::size_t i = 0; match && i < k; ++i) match = x.shape()[x.dim() - k + i] == shape_[i];
  ADJOINT_CHECK(match, Shape, "nn.LayerNorm", "input ", describe(x),
                " does not end in the normalized shape ", shape_);
  return layer_norm(x, shape_, weight, bias, eps_);
}

RMSNorm::RMSNorm(int64_t dim, double eps) : Module("RMSNorm"), dim_(dim), eps_(eps) {
  ADJOINT_CHECK(dim > 0, Value, "nn.RMSNorm", "dim must be positive, got ", dim);
  ADJOINT_CHECK(eps >= 0, Value, "nn.RMSNorm", "eps must be non-negative, got ", eps);
  weight = register_parameter("weight", ones({dim}));
}

Tensor RMSNorm::forward(const Tensor& x) {
  ADJOINT_CHECK(x.defined(), Value, "nn.RMSNorm", "got an undefined input");
  ADJOINT_CHECK(x.dim() >= 1 && x.size(-1) == dim_, Shape, "nn.RMSNorm", "input ", describe(x),
                " does not end in dim ", dim_);
  return rms_norm(x, weight, eps_);
}

}  // namespace adjoint::nn
