// What the convolution ops (conv.cpp) and their public functions (conv_api.cpp) share: a
// convolution's attributes as op fields, the shape rule every op and imported graph is checked
// with, and the three op structs' entry points.
#pragma once

#include <cstdint>
#include <span>
#include <tuple>
#include <vector>

#include "adjoint/tensor.h"
#include "backend/conv_kernels.h"
#include "dispatch/layer.h"

namespace adjoint::detail {

/// A convolution's attributes: per spatial dim stride, padding on each side, dilation; and
/// groups. The transposed convolution and the weight gradient are described by the geometry
/// of the convolution they are the adjoints of.
struct ConvAttrs {
  std::vector<int64_t> stride, pad_l, pad_r, dilation;
  int64_t groups = 1;
  auto fields() { return std::tie(stride, pad_l, pad_r, dilation, groups); }
  std::size_t spatial() const { return stride.size(); }
  kernels::ConvGeometry geometry() const { return {stride, pad_l, pad_r, dilation, groups}; }
  /// The same convolution over `b` stacked problems as groups (a batching rule's form).
  ConvAttrs times_groups(int64_t b) const { return {stride, pad_l, pad_r, dilation, groups * b}; }
};

/// Checks that input [N, C, *in] and weight [O, C / groups, *k] (and a bias [O] when defined)
/// are one floating dtype and fit `a` with an output of at least one element per dim; returns
/// the output shape [N, O, *out]. `op` names the function in errors.
Shape conv_output_shape(const ValueSpec& x, const ValueSpec& w, const ValueSpec* bias,
                        const ConvAttrs& a, const char* op);

/// ValueSpec of a tensor (undefined ones too).
ValueSpec spec_of_tensor(const Tensor& t);

/// The three primitives: convolution(x, w, b); its adjoint in x, conv_transpose(gy, w, b) with
/// the input's spatial size `in_size` (plus a bias over its channels); its adjoint in w,
/// conv_weight_grad(x, gy) with kernel size `kernel`.
Tensor apply_convolution(const ConvAttrs& a, const Tensor& x, const Tensor& w, const Tensor& b);
Tensor apply_conv_transpose(const ConvAttrs& a, const std::vector<int64_t>& in_size,
                            const Tensor& gy, const Tensor& w, const Tensor& b);
Tensor apply_conv_weight_grad(const ConvAttrs& a, const std::vector<int64_t>& kernel,
                              const Tensor& x, const Tensor& gy);

}  // namespace adjoint::detail
