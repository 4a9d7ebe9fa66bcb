// Fused gradient primitives that activations' VJPs call (as PyTorch's tanh_backward etc.):
// one kernel each, and differentiable themselves so double backward works. Internal: users
// reach them through the activations' gradients.
#pragma once

#include "adjoint/tensor.h"

namespace adjoint {

/// gy * (1 - y^2), the gradient of tanh given its output y.
Tensor tanh_backward(const Tensor& gy, const Tensor& y);
/// gy * y * (1 - y), the gradient of sigmoid given its output y.
Tensor sigmoid_backward(const Tensor& gy, const Tensor& y);
/// gy where y > 0, else 0: the gradient of relu given its output y.
Tensor relu_backward(const Tensor& gy, const Tensor& y);

}  // namespace adjoint
