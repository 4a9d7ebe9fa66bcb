// Fused kernels for the nn functions: softmax cross-entropy from logits and layer norm, each
// forward and the gradient with respect to its main input. Like the kernels in kernels.h they see
// plain tensors (no autograd), accept any strides on input and allocate contiguous outputs. The
// gradient kernels are the forwards of differentiable primitives in src/ops/, whose own rules are
// written with ops.
#pragma once

#include <cstdint>

#include "adjoint/tensor.h"

namespace adjoint::kernels {

/// Throws an Index error naming `op`, the first bad target and `classes` unless every entry
/// of the int64 `target` lies in [0, classes) or equals `ignore_index`.
void check_class_targets(const Tensor& target, int64_t classes, int64_t ignore_index,
                         const char* op);

struct CrossEntropyForward {
  Tensor loss;        ///< [N]: logsumexp(logits[i]) - logits[i, target[i]]; 0 for ignored rows
  Tensor lse;         ///< [N]: logsumexp of each row
  int64_t valid = 0;  ///< rows whose target is not ignore_index
};
/// Per-row softmax cross-entropy of float logits [N, C] and int64 targets [N] (bounds
/// checked, reported as "cross_entropy").
CrossEntropyForward cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index);

/// The gradient of per-row softmax cross-entropy with respect to the logits [N, C]:
/// (softmax(logits[i]) - one_hot(target[i])) * g[i], and 0 on rows whose target is
/// ignore_index. g is [N] with the logits' dtype; targets must be in range (check_class_targets).
Tensor cross_entropy_backward(const Tensor& g, const Tensor& logits, const Tensor& target,
                              int64_t ignore_index);

struct LayerNormForward {
  Tensor y;     ///< x's shape: (x - mean) * rstd * weight + bias
  Tensor mean;  ///< x's leading dims, then 1 for each normalized dim (keepdim form)
  Tensor rstd;  ///< 1 / sqrt(biased variance + eps), same shape as mean
};
/// Layer norm over the trailing `normalized_dims` dims of float x; weight and bias are
/// undefined or shaped like those trailing dims, with x's dtype.
LayerNormForward layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor& weight,
                            const Tensor& bias, double eps);
/// The input gradient of layer norm given mean and rstd (as layer_norm returns them, or any
/// tensors of that shape): with x̂ = (x - mean) rstd and g = gy weight (gy without weight),
/// rstd (g - mean(g) - x̂ mean(g x̂)), means over the trailing `normalized_dims` dims. gy has x's
/// shape; weight is undefined or shaped like the trailing dims; all share x's dtype.
Tensor layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, int64_t normalized_dims);

}  // namespace adjoint::kernels
