// Pooling and reshaping modules: each forward is one call of the op of the same name.
#include "adjoint/nn/pooling.h"

#include "adjoint/ops.h"

namespace adjoint::nn {

MaxPool2d::MaxPool2d(std::vector<int64_t> kernel_size, std::vector<int64_t> stride,
                     std::vector<int64_t> padding, std::vector<int64_t> dilation, bool ceil_mode)
    : Module("MaxPool2d"),
      kernel_(std::move(kernel_size)),
      stride_(std::move(stride)),
      padding_(std::move(padding)),
      dilation_(std::move(dilation)),
      ceil_mode_(ceil_mode) {}

Tensor MaxPool2d::forward(const Tensor& x) {
  return max_pool2d(x, kernel_, stride_, padding_, dilation_, ceil_mode_);
}

AvgPool2d::AvgPool2d(std::vector<int64_t> kernel_size, std::vector<int64_t> stride,
                     std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad,
                     std::optional<int64_t> divisor_override)
    : Module("AvgPool2d"),
      kernel_(std::move(kernel_size)),
      stride_(std::move(stride)),
      padding_(std::move(padding)),
      ceil_mode_(ceil_mode),
      count_include_pad_(count_include_pad),
      divisor_override_(divisor_override) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  return avg_pool2d(x, kernel_, stride_, padding_, ceil_mode_, count_include_pad_,
                    divisor_override_);
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, output_size_); }

Tensor Flatten::forward(const Tensor& x) { return flatten(x, start_dim_, end_dim_); }

Tensor Upsample::forward(const Tensor& x) { return interpolate(x, options_); }

}  // namespace adjoint::nn
