// Fused normalisation kernels over channels: batch norm's per-channel statistics of an input
// [N, C, *] over every dim but the channel dim 1, the normalisation with them and its input
// gradient; group norm's forward (its input gradient is layer_norm_backward's, nn_kernels.h). Like
// the kernels in kernels.h they see plain tensors (no autograd), accept any strides (a strided
// input, such as a channels-last view, is copied to [N, C, *] order first) and allocate contiguous
// outputs. The gradient kernel is the forward of the differentiable primitive batch_norm_backward
// (src/ops/batch_norm.cpp), whose own rules are written with ops.
#pragma once

#include <cstdint>

#include "adjoint/tensor.h"

namespace adjoint::kernels {

/// Per-channel mean and variance of float x [N, C, *], packed [2, C]: row 0 the mean, row 1
/// sum((x - mean)^2) / (M - correction) with M = x.numel() / C (correction 0: biased, 1:
/// Bessel's). A channel of no elements has NaN statistics (0 / 0), as mean() and var() give.
Tensor batch_norm_moments(const Tensor& x, int64_t correction);

struct BatchNormForward {
  Tensor y;     ///< x's shape: (x - mean) * rstd * weight + bias, per channel
  Tensor mean;  ///< [C]: the batch mean
  Tensor rstd;  ///< [C]: 1 / sqrt(biased batch variance + eps)
};
/// Batch norm of float x [N, C, *] with its own batch statistics; weight and bias are undefined
/// or [C], with x's dtype.
BatchNormForward batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);

/// The input gradient of batch norm given mean and rstd ([C], as batch_norm returns them, or
/// any tensors of that shape): with x̂ = (x - mean) rstd and g = gy weight (gy without weight),
/// rstd (g - mean(g) - x̂ mean(g x̂)), means per channel over every dim but 1. gy has x's shape;
/// all share x's dtype.
Tensor batch_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd);

struct GroupNormForward {
  Tensor y;     ///< x's shape: (x - mean) * rstd * weight + bias, statistics per (example, group)
  Tensor mean;  ///< [N, G]
  Tensor rstd;  ///< [N, G]: 1 / sqrt(biased variance + eps)
};
/// Group norm of float x [N, C, *] over `groups` groups of C / groups channels (and every
/// spatial position) per example; weight and bias are undefined or [C], with x's dtype.
GroupNormForward group_norm(const Tensor& x, int64_t groups, const Tensor& weight,
                            const Tensor& bias, double eps);

}  // namespace adjoint::kernels
