// Fused kernels for the nn functions: softmax cross-entropy from logits and layer norm, each
// forward and the gradient with respect to its main input. Like the kernels in kernels.h they see
// plain tensors (no autograd), accept any strides on input and allocate contiguous outputs. The
// gradient kernels are the forwards of differentiable primitives in src/ops/, whose own rules are
// written with ops.
#pragma once

#include <cstdint>

#include "adjoint/tensor.h"

namespace adjoint::kernels {

struct CrossEntropyForward {
  Tensor loss;        ///< [N]: logsumexp(logits[i]) - logits[i, target[i]]; 0 for ignored rows
  Tensor lse;         ///< [N]: logsumexp of each row
  int64_t valid = 0;  ///< rows whose target is not ignore_index
};

struct LstmSequenceForward {
  Tensor out;    ///< [2, T, B, H]: every step's h, then every step's c
  Tensor gates;  ///< [T, B, 4H]: every step's gate pre-activations, for the gradient
};

struct LayerNormForward {
  Tensor y;     ///< x's shape: (x - mean) * rstd * weight + bias
  Tensor mean;  ///< x's leading dims, then 1 for each normalized dim (keepdim form)
  Tensor rstd;  ///< 1 / sqrt(biased variance + eps), same shape as mean
};

// This family's kernels, declared once for the callers here and for each device's
// implementation (Note [The kernel table] in backend/device_kernels.h).
#include "backend/kernel_lists/nn.inc"

}  // namespace adjoint::kernels
