// The transposes that pooling's gradients run, as functions of their own (as PyTorch's
// max_pool2d_with_indices_backward and avg_pool2d_backward): one op each, differentiable
// themselves, so double backward works. Internal: users reach them through pooling's
// gradients; the registry samples them directly.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint {

/// max pooling's gradient: gy [..., OH, OW] added into zeros [..., H, W] (plane = {H, W}) at
/// the int64 indices of max_pool2d_with_indices (one per element of gy, into h * W + w).
Tensor max_pool2d_backward(const Tensor& gy, const Tensor& indices, const Shape& plane);
/// avg_pool2d's gradient for an input of `input_shape` ([N, C, H, W] or [C, H, W]) with the
/// same arguments as avg_pool2d; gy has avg_pool2d's output shape.
Tensor avg_pool2d_backward(const Tensor& gy, const Shape& input_shape,
                           std::vector<int64_t> kernel_size, std::vector<int64_t> stride = {},
                           std::vector<int64_t> padding = {0}, bool ceil_mode = false,
                           bool count_include_pad = true,
                           std::optional<int64_t> divisor_override = std::nullopt);

}  // namespace adjoint
