// Gradient clipping over a list of parameters, as torch.nn.utils.clip_grad_norm_ and
// clip_grad_value_. Both modify .grad in place and skip parameters without a gradient.
#pragma once

#include <vector>

#include "adjoint/tensor.h"

namespace adjoint::optim {

/// The norm_type-norm of all gradients together (as if concatenated into one vector), returned
/// as a double, measured before clipping. When max_norm / (total + 1e-6) < 1, every gradient
/// is multiplied by that factor (PyTorch's rule, so a norm a hair under max_norm is scaled by
/// a factor a hair under 1). norm_type may be any p > 0 or INFINITY (max |g|). Returns 0 when
/// no parameter has a gradient. With error_if_nonfinite, a NaN or infinite total throws
/// instead of scaling the gradients by NaN.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2,
                       bool error_if_nonfinite = false);

/// Clamps every gradient element into [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace adjoint::optim
