// Fused gradient primitives that the VJPs of activations, softmax, layer norm and cross-entropy
// call (as PyTorch's tanh_backward etc.): one kernel each, and differentiable themselves so
// double backward works. Internal: users reach them through the ops' gradients.
#pragma once

#include "adjoint/tensor.h"

namespace adjoint {

/// gy * (1 - y^2), the gradient of tanh given its output y.
Tensor tanh_backward(const Tensor& gy, const Tensor& y);
/// gy * y * (1 - y), the gradient of sigmoid given its output y.
Tensor sigmoid_backward(const Tensor& gy, const Tensor& y);
/// gy where y > 0 (or y is NaN), else 0: the gradient of relu given its output y.
Tensor relu_backward(const Tensor& gy, const Tensor& y);
/// gy * gelu'(x), the gradient of gelu (either form) given its input x.
Tensor gelu_backward(const Tensor& gy, const Tensor& x, GeluApproximation approximate);
/// y * (gy - sum(gy * y, dim)), the gradient of softmax along dim given its output y.
Tensor softmax_backward(const Tensor& gy, const Tensor& y, int64_t dim);
/// gy - exp(y) * sum(gy, dim), the gradient of log_softmax along dim given its output y.
Tensor log_softmax_backward(const Tensor& gy, const Tensor& y, int64_t dim);
/// rstd * (g - mean(g) - x̂ * mean(g * x̂)) with x̂ = (x - mean) * rstd and g = gy * weight (gy
/// when weight is undefined), means over the trailing `normalized_dims` dims: the input
/// gradient of layer_norm, with mean and rstd (keepdim shape) treated as inputs of their own.
Tensor layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, int64_t normalized_dims);
/// (softmax(logits) - one_hot(target)) * g[:, None] for logits [N, C], int64 target [N] and
/// per-row weights g (broadcast to [N]), with 0 on rows whose target is ignore_index: the
/// gradient of per-row softmax cross-entropy.
Tensor cross_entropy_backward(const Tensor& g, const Tensor& logits, const Tensor& target,
                              int64_t ignore_index);

}  // namespace adjoint
