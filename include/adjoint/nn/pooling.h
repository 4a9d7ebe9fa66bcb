// Pooling and reshaping modules for convolutional networks: MaxPool2d, AvgPool2d,
// AdaptiveAvgPool2d, Flatten and Upsample. Parameter-free wrappers over the ops of
// adjoint/pooling.h (and flatten), with PyTorch's constructor arguments and defaults, so they
// can sit in a Sequential.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "adjoint/nn/module.h"
#include "adjoint/pooling.h"

namespace adjoint::nn {

/// max_pool2d over [N, C, H, W] or [C, H, W]; an empty stride means the kernel size.
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(std::vector<int64_t> kernel_size, std::vector<int64_t> stride = {},
                     std::vector<int64_t> padding = {0}, std::vector<int64_t> dilation = {1},
                     bool ceil_mode = false);
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<int64_t> kernel_, stride_, padding_, dilation_;
  bool ceil_mode_;
};

/// avg_pool2d over [N, C, H, W] or [C, H, W].
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(std::vector<int64_t> kernel_size, std::vector<int64_t> stride = {},
                     std::vector<int64_t> padding = {0}, bool ceil_mode = false,
                     bool count_include_pad = true,
                     std::optional<int64_t> divisor_override = std::nullopt);
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<int64_t> kernel_, stride_, padding_;
  bool ceil_mode_, count_include_pad_;
  std::optional<int64_t> divisor_override_;
};

/// adaptive_avg_pool2d to output_size ({1} is global average pooling).
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(std::vector<int64_t> output_size)
      : Module("AdaptiveAvgPool2d"), output_size_(std::move(output_size)) {}
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<int64_t> output_size_;
};

/// flatten(x, start_dim, end_dim): by default every dim but the batch dim, [N, *] to [N, prod].
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& x) override;

 private:
  int64_t start_dim_, end_dim_;
};

/// interpolate with fixed options (a size or a scale factor, the mode, align_corners).
class Upsample : public Module {
 public:
  explicit Upsample(InterpolateOptions options)
      : Module("Upsample"), options_(std::move(options)) {}
  Tensor forward(const Tensor& x) override;

 private:
  InterpolateOptions options_;
};

}  // namespace adjoint::nn
