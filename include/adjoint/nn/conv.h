// nn::Conv1d, nn::Conv2d and nn::ConvTranspose2d: the convolution layers over adjoint/conv.h,
// with PyTorch's constructor arguments and default initialisation.
#pragma once

#include <cstdint>
#include <vector>

#include "adjoint/conv.h"
#include "adjoint/generator.h"
#include "adjoint/nn/module.h"

namespace adjoint::nn {

/// What the three layers share: the sizes and the geometry, the parameters "weight" and
/// "bias" (absent when bias = false), and PyTorch's initialisation: W ~ kaiming_uniform(a =
/// sqrt(5)), which is U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and b ~ U(±1/sqrt(fan_in)), where
/// fan_in = weight.size(1) * kernel volume (in / groups * k for a convolution, out / groups * k
/// for a transposed one, as torch's _calculate_fan_in_and_fan_out reads the weight).
class ConvLayer : public Module {
 public:
  int64_t in_channels() const { return in_; }
  int64_t out_channels() const { return out_; }
  const std::vector<int64_t>& kernel_size() const { return kernel_; }
  int64_t groups() const { return groups_; }

  Tensor weight;  ///< [out, in / groups, *k]; transposed: [in, out / groups, *k]
  Tensor bias;    ///< [out], undefined without bias

 protected:
  ConvLayer(const char* type, std::size_t dims, int64_t in, int64_t out, const ConvArg& kernel,
            int64_t groups, bool bias, bool transposed, Generator* gen);
  /// Checks x's rank and channel count, naming the layer.
  void check_input(const Tensor& x) const;

  const char* type_;
  std::size_t dims_;
  int64_t in_, out_, groups_;
  std::vector<int64_t> kernel_;
};

/// conv1d(x, weight, bias, stride, padding, dilation, groups) over x [N, in, L] or [in, L].
class Conv1d : public ConvLayer {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, const ConvArg& kernel_size,
         const ConvArg& stride = 1, const ConvPadding& padding = 0, const ConvArg& dilation = 1,
         int64_t groups = 1, bool bias = true, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;

 private:
  ConvArg stride_, dilation_;
  ConvPadding padding_;
};

/// conv2d(x, weight, bias, stride, padding, dilation, groups) over x [N, in, H, W] or
/// [in, H, W].
class Conv2d : public ConvLayer {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, const ConvArg& kernel_size,
         const ConvArg& stride = 1, const ConvPadding& padding = 0, const ConvArg& dilation = 1,
         int64_t groups = 1, bool bias = true, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;

 private:
  ConvArg stride_, dilation_;
  ConvPadding padding_;
};

/// conv_transpose2d(x, weight, bias, stride, padding, output_padding, groups, dilation) over
/// x [N, in, H, W] or [in, H, W] (PyTorch's argument order: groups, bias, then dilation).
class ConvTranspose2d : public ConvLayer {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, const ConvArg& kernel_size,
                  const ConvArg& stride = 1, const ConvArg& padding = 0,
                  const ConvArg& output_padding = 0, int64_t groups = 1, bool bias = true,
                  const ConvArg& dilation = 1, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;

 private:
  ConvArg stride_, padding_, output_padding_, dilation_;
};

}  // namespace adjoint::nn
