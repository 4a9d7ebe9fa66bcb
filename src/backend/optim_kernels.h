// The optimizer kernels: updates that would be several elementwise ops, in one pass.
#pragma once

#include "adjoint/device.h"
#include "adjoint/tensor.h"

namespace adjoint::kernels {

/// The scalars of one Adam/AdamW update, computed once in double by the caller
/// (src/optim/adam_fused.cpp) and rounded to the parameter's dtype by the kernel, as the
/// in-place ops of the op-by-op update round their scalars.
struct AdamScalars {
  double decay;            // AdamW: p *= 1 - lr * weight_decay
  double weight_decay;     // Adam: g += weight_decay * p
  double w;                // lerp weight 1 - beta1
  double one_minus_w;      // the other lerp branch multiplies by 1 - w (not always beta1)
  double beta2;            // v *= beta2
  double one_minus_beta2;  // v's new-gradient weight
  double sqrt_bc2;         // sqrt(1 - beta2^t)
  double eps;
  double neg_step_size;  // -lr / (1 - beta1^t)
  bool decoupled_decay;  // AdamW's decay of the weights
  bool l2;               // Adam's L2 term added to the gradient
  bool small_w;          // w < 0.5: m + w (g - m), else g - (g - m)(1 - w) (torch's lerp)
};

#include "backend/kernel_lists/optim.inc"

}  // namespace adjoint::kernels
