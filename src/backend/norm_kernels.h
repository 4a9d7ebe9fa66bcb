// Fused normalisation kernels over channels: batch norm's per-channel statistics of an input
// [N, C, *] over every dim but the channel dim 1, the normalisation with them and its input
// gradient; group norm's forward (its input gradient is layer_norm_backward's, nn_kernels.h). Like
// the kernels in kernels.h they see plain tensors (no autograd) and accept any strides: batch
// norm's read a channels-last input (core/memory_format.h) in place and give results of x's shape
// channels-last too, as PyTorch's memory-format propagation does; other strided inputs (and every
// input of group norm) are copied to [N, C, *] order first, and their outputs are contiguous. The
// gradient kernel is the forward of the differentiable primitive batch_norm_backward
// (src/ops/batch_norm.cpp), whose own rules are written with ops.
#pragma once

#include <cstdint>

#include "adjoint/tensor.h"

namespace adjoint::kernels {

struct BatchNormForward {
  Tensor y;     ///< x's shape: (x - mean) * rstd * weight + bias, per channel
  Tensor mean;  ///< [C]: the batch mean
  Tensor rstd;  ///< [C]: 1 / sqrt(biased batch variance + eps)
};

struct GroupNormForward {
  Tensor y;     ///< x's shape: (x - mean) * rstd * weight + bias, statistics per (example, group)
  Tensor mean;  ///< [N, G]
  Tensor rstd;  ///< [N, G]: 1 / sqrt(biased variance + eps)
};

// This family's kernels, declared once for the callers here and for each device's
// implementation (Note [The kernel table] in backend/device_kernels.h).
#include "backend/kernel_lists/norm.inc"

}  // namespace adjoint::kernels
