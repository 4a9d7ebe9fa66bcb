// The convolution layers: PyTorch's default initialisation and an input check that names the
// layer, then the functional convolution (which checks the rest).
#include "adjoint/nn/conv.h"

#include <cmath>

#include "adjoint/error.h"
#include "adjoint/nn/init.h"
#include "adjoint/ops.h"

namespace adjoint::nn {

ConvLayer::ConvLayer(const char* type, std::size_t dims, int64_t in, int64_t out,
                     const ConvArg& kernel, int64_t groups, bool with_bias, bool transposed,
                     Generator* gen)
    : Module(std::string(type).substr(3)),
      type_(type),
      dims_(dims),
      in_(in),
      out_(out),
      groups_(groups) {
  const std::vector<int64_t>& k = kernel.values();
  ADJOINT_CHECK(k.size() == 1 || k.size() == dims, Value, type, "kernel_size needs 1 or ", dims,
                " values, got ", Shape(k));
  kernel_ = k.size() == dims ? k : std::vector<int64_t>(dims, k[0]);
  ADJOINT_CHECK(in > 0 && out > 0 && groups > 0, Value, type,
                "channels and groups must be positive, got in ", in, ", out ", out, ", groups ",
                groups);
  ADJOINT_CHECK(in % groups == 0 && out % groups == 0, Value, type, "groups (", groups,
                ") must divide in_channels (", in, ") and out_channels (", out, ")");
  int64_t volume = 1;
  for (int64_t s : kernel_) {
    ADJOINT_CHECK(s > 0, Value, type, "kernel_size must be positive, got ", Shape(kernel_));
    volume *= s;
  }
  Shape shape = transposed ? Shape{in, out / groups} : Shape{out, in / groups};
  for (int64_t s : kernel_) shape.push_back(s);
  // kaiming_uniform_(a = sqrt(5)): gain sqrt(2 / (1 + 5)) times sqrt(3 / fan_in) is
  // 1 / sqrt(fan_in); fan_in is the weight's dim 1 times the kernel volume.
  const double bound = 1.0 / std::sqrt(static_cast<double>(shape[1] * volume));
  Generator& g = gen ? *gen : default_generator();
  weight = register_parameter("weight", empty(shape));
  init::uniform_(weight, g, -bound, bound);
  if (with_bias) {
    bias = register_parameter("bias", empty({out}));
    init::uniform_(bias, g, -bound, bound);
  }
}

void ConvLayer::check_input(const Tensor& x) const {
  ADJOINT_CHECK(x.defined(), Value, type_, "got an undefined input");
  const auto d = static_cast<int64_t>(dims_);
  ADJOINT_CHECK(x.dim() == d + 1 || x.dim() == d + 2, Shape, type_, "expected a ", d + 1,
                "-d (unbatched) or ", d + 2, "-d (batched) input, got ", describe(x));
  const int64_t c = x.shape()[x.dim() - d - 1];
  ADJOINT_CHECK(c == in_, Shape, type_, "expected ", in_, " input channels, got ", c, ": ",
                describe(x));
}

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, const ConvArg& kernel_size,
               const ConvArg& stride, const ConvPadding& padding, const ConvArg& dilation,
               int64_t groups, bool bias, Generator* gen)
    : ConvLayer("nn.Conv1d", 1, in_channels, out_channels, kernel_size, groups, bias, false, gen),
      stride_(stride),
      dilation_(dilation),
      padding_(padding) {}

Tensor Conv1d::forward(const Tensor& x) {
  check_input(x);
  return conv1d(x, weight, bias, stride_, padding_, dilation_, groups_);
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, const ConvArg& kernel_size,
               const ConvArg& stride, const ConvPadding& padding, const ConvArg& dilation,
               int64_t groups, bool bias, Generator* gen)
    : ConvLayer("nn.Conv2d", 2, in_channels, out_channels, kernel_size, groups, bias, false, gen),
      stride_(stride),
      dilation_(dilation),
      padding_(padding) {}

Tensor Conv2d::forward(const Tensor& x) {
  check_input(x);
  return conv2d(x, weight, bias, stride_, padding_, dilation_, groups_);
}

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels,
                                 const ConvArg& kernel_size, const ConvArg& stride,
                                 const ConvArg& padding, const ConvArg& output_padding,
                                 int64_t groups, bool bias, const ConvArg& dilation, Generator* gen)
    : ConvLayer("nn.ConvTranspose2d", 2, in_channels, out_channels, kernel_size, groups, bias, true,
                gen),
      stride_(stride),
      padding_(padding),
      output_padding_(output_padding),
      dilation_(dilation) {}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  check_input(x);
  return conv_transpose2d(x, weight, bias, stride_, padding_, output_padding_, groups_, dilation_);
}

}  // namespace adjoint::nn
