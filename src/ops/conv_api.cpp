// The public convolutions (adjoint/conv.h): PyTorch's argument forms checked and turned into the
// geometry of conv.cpp's ops (padding "same" and "valid" into per-side padding, a transposed
// convolution into the geometry of the convolution it is the adjoint of), unbatched inputs
// given a batch of one; autocast's policy is the Autocast layer's, and the dtype checks here see
// the dtypes it will give the op (autocast_target). The shape rule
// that ops and imported graphs share (conv_output_shape) is here too.
#include "adjoint/conv.h"

#include "adjoint/error.h"
#include "ops/common.h"
#include "ops/conv_geometry.h"

namespace adjoint {
namespace detail {

ValueSpec spec_of_tensor(const Tensor& t) {
  if (!t.defined()) return ValueSpec{Shape{}, DType::Float32, false};
  return ValueSpec{t.shape(), t.dtype(), true};
}

/// t as the convolution op will see it below the Autocast layer (its dtype lowered where an
/// autocast guard is on).
static ValueSpec spec_below_autocast(const Tensor& t) {
  ValueSpec v = spec_of_tensor(t);
  if (v.defined) v.dtype = autocast_target(v.dtype, AutocastPolicy::Lower);
  return v;
}

Shape conv_output_shape(const ValueSpec& x, const ValueSpec& w, const ValueSpec* bias,
                        const ConvAttrs& a, const char* op) {
  const std::size_t d = a.spatial();
  ADJOINT_CHECK(
      d >= 1 && d <= 3 && a.pad_l.size() == d && a.pad_r.size() == d && a.dilation.size() == d,
      Value, op, "expected 1 to 3 spatial dims of stride, padding and dilation");
  ADJOINT_CHECK(x.shape.size() == d + 2, Shape, op, "expected a ", d + 2,
                "-d input [N, C, ...], got ", describe(x));
  ADJOINT_CHECK(w.shape.size() == d + 2, Shape, op, "expected a ", d + 2,
                "-d weight [out, in / groups, ...], got ", describe(w));
  ADJOINT_CHECK(is_floating(x.dtype) && x.dtype == w.dtype, DType, op,
                "input and weight must be one floating dtype: input ", describe(x), " vs weight ",
                describe(w));
  const int64_t g = a.groups;
  ADJOINT_CHECK(g >= 1, Value, op, "groups must be positive, got ", g);
  const int64_t c = x.shape[1], o = w.shape[0];
  ADJOINT_CHECK(c % g == 0 && o % g == 0, Value, op, "groups (", g,
                ") must divide the input channels and the output channels: input ", describe(x),
                " vs weight ", describe(w));
  ADJOINT_CHECK(w.shape[1] * g == c, Shape, op, "expected input with ", w.shape[1] * g,
                " channels (weight ", describe(w), ", groups ", g, "), got input ", describe(x));
  if (bias && bias->defined) {
    ADJOINT_CHECK(bias->shape == Shape{o}, Shape, op, "bias must have shape [", o, "]: bias ",
                  describe(*bias), " vs weight ", describe(w));
    ADJOINT_CHECK(bias->dtype == x.dtype, DType, op, "bias must have the input's dtype: bias ",
                  describe(*bias), " vs input ", describe(x));
  }
  Shape out{x.shape[0], o};
  for (std::size_t i = 0; i < d; ++i) {
    ADJOINT_CHECK(a.stride[i] >= 1 && a.dilation[i] >= 1, Value, op,
                  "stride and dilation must be positive, got stride ", Shape(a.stride),
                  " and dilation ", Shape(a.dilation));
    // (a transposed convolution's geometry may have a negative right padding: see
    // conv_transpose_nd; the kernel must still fit, below)
    ADJOINT_CHECK(a.pad_l[i] >= 0, Value, op, "padding must be non-negative, got ", Shape(a.pad_l));
    const int64_t k = w.shape[2 + i], in = x.shape[2 + i];
    const int64_t span = in + a.pad_l[i] + a.pad_r[i] - a.dilation[i] * (k - 1) - 1;
    ADJOINT_CHECK(span >= 0, Shape, op, "the kernel (size ", k, ", dilation ", a.dilation[i],
                  ") does not fit the padded input: input ", describe(x), " with padding ",
                  Shape(a.pad_l), " vs weight ", describe(w));
    out.push_back(span / a.stride[i] + 1);
  }
  return out;
}

}  // namespace detail

namespace {

using detail::ConvAttrs;

// A per-dim argument as d values (one number repeats).
std::vector<int64_t> per_dim(const std::vector<int64_t>& v, std::size_t d, const char* what,
                             const char* op) {
  ADJOINT_CHECK(v.size() == 1 || v.size() == d, Value, op, what, " needs 1 or ", d, " values, got ",
                Shape(v));
  return v.size() == d ? v : std::vector<int64_t>(d, v[0]);
}

// Input and weight present, of ranks d + 1 / d + 2 and d + 2.
void check_ranks(const Tensor& x, const Tensor& w, std::size_t d, const char* op) {
  ADJOINT_CHECK(x.defined() && w.defined(), Value, op, "got an undefined input or weight");
  const auto r = static_cast<int64_t>(d);
  ADJOINT_CHECK(x.dim() == r + 1 || x.dim() == r + 2, Shape, op, "expected a ", r + 1,
                "-d (unbatched) or ", r + 2, "-d (batched) input, got ", describe(x));
  ADJOINT_CHECK(w.dim() == r + 2, Shape, op, "expected a ", r + 2, "-d weight, got ", describe(w),
                " for input ", describe(x));
}

// The convolutions' geometry from PyTorch's arguments (padding resolved against the weight).
ConvAttrs conv_attrs(const Tensor& w, std::size_t d, const ConvArg& stride,
                     const ConvPadding& padding, const ConvArg& dilation, int64_t groups,
                     const char* op) {
  ConvAttrs a;
  a.stride = per_dim(stride.values(), d, "stride", op);
  a.dilation = per_dim(dilation.values(), d, "dilation", op);
  a.groups = groups;
  if (!padding.is_mode()) {
    a.pad_l = per_dim(padding.values(), d, "padding", op);
    for (int64_t p : a.pad_l)
      ADJOINT_CHECK(p >= 0, Value, op, "padding must be non-negative, got ", Shape(a.pad_l));
    a.pad_r = a.pad_l;
    return a;
  }
  const std::string& mode = padding.mode();
  ADJOINT_CHECK(mode == "same" || mode == "valid", Value, op,
                "padding must be numbers, \"same\" or \"valid\", got \"", mode, "\"");
  a.pad_l.assign(d, 0);
  a.pad_r.assign(d, 0);
  if (mode == "valid") return a;
  for (int64_t s : a.stride)
    ADJOINT_CHECK(s == 1, Value, op,
                  "padding=\"same\" is not supported for strided convolutions, got stride ",
                  Shape(a.stride));
  for (std::size_t i = 0; i < d; ++i) {
    // The total padding dilation (k - 1), the odd element on the right (PyTorch's choice).
    const int64_t total = a.dilation[i] * (w.shape()[2 + i] - 1);
    ADJOINT_CHECK(total >= 0 && a.dilation[i] >= 1, Value, op, "dilation must be positive, got ",
                  Shape(a.dilation));
    a.pad_l[i] = total / 2;
    a.pad_r[i] = total - total / 2;
  }
  return a;
}

// Undefined stays undefined; a batched-as-one input for an unbatched call.
Tensor batched_input(const Tensor& x, std::size_t d) {
  return x.dim() == static_cast<int64_t>(d) + 1 ? x.unsqueeze(0) : x;
}

Tensor convolution_nd(const Tensor& x, const Tensor& w, const Tensor& b, const ConvArg& stride,
                      const ConvPadding& padding, const ConvArg& dilation, int64_t groups,
                      std::size_t d, const char* op) {
  check_ranks(x, w, d, op);
  const ConvAttrs a = conv_attrs(w, d, stride, padding, dilation, groups, op);
  const Tensor xb = batched_input(x, d);
  const detail::ValueSpec bs = detail::spec_below_autocast(b);
  detail::conv_output_shape(detail::spec_below_autocast(xb), detail::spec_below_autocast(w), &bs, a,
                            op);
  const Tensor y = detail::apply_convolution(a, xb, w, b);
  return x.dim() == static_cast<int64_t>(d) + 1 ? y.squeeze(0) : y;
}

Tensor conv_transpose_nd(const Tensor& x, const Tensor& w, const Tensor& b, const ConvArg& stride,
                         const ConvArg& padding, const ConvArg& output_padding, int64_t groups,
                         const ConvArg& dilation, std::size_t d, const char* op) {
  check_ranks(x, w, d, op);
  ConvAttrs a;
  a.stride = per_dim(stride.values(), d, "stride", op);
  a.dilation = per_dim(dilation.values(), d, "dilation", op);
  a.pad_l = per_dim(padding.values(), d, "padding", op);
  const std::vector<int64_t> out_pad = per_dim(output_padding.values(), d, "output_padding", op);
  a.groups = groups;
  ADJOINT_CHECK(groups >= 1, Value, op, "groups must be positive, got ", groups);
  const Tensor xb = batched_input(x, d);
  const DType xd = detail::autocast_target(xb.dtype(), AutocastPolicy::Lower),
              wd = detail::autocast_target(w.dtype(), AutocastPolicy::Lower);
  ADJOINT_CHECK(is_floating(xd) && xd == wd, DType, op,
                "input and weight must be one floating dtype: input ", describe(x), " vs weight ",
                describe(w));
  ADJOINT_CHECK(w.shape()[0] == xb.shape()[1] && w.shape()[0] % groups == 0, Shape, op,
                "expected a weight [", xb.shape()[1], ", out / groups, ...] with groups (", groups,
                ") dividing ", xb.shape()[1], ": input ", describe(x), " vs weight ", describe(w));
  std::vector<int64_t> out_size(d);
  a.pad_r.resize(d);
  for (std::size_t i = 0; i < d; ++i) {
    const int64_t s = a.stride[i], dil = a.dilation[i], p = a.pad_l[i], op_i = out_pad[i];
    ADJOINT_CHECK(s >= 1 && dil >= 1 && p >= 0 && op_i >= 0, Value, op,
                  "stride and dilation must be positive and padding non-negative, got stride ",
                  Shape(a.stride), ", dilation ", Shape(a.dilation), ", padding ", Shape(a.pad_l),
                  ", output_padding ", Shape(out_pad));
    ADJOINT_CHECK(op_i < s || op_i < dil, Value, op,
                  "output_padding must be smaller than either stride or dilation, got "
                  "output_padding ",
                  Shape(out_pad), ", stride ", Shape(a.stride), ", dilation ", Shape(a.dilation));
    out_size[i] = (xb.shape()[2 + i] - 1) * s - 2 * p + dil * (w.shape()[2 + i] - 1) + op_i + 1;
    ADJOINT_CHECK(out_size[i] >= 1, Shape, op, "the output would have size ", out_size[i],
                  " along spatial dim ", i, ": input ", describe(x), ", weight ", describe(w));
    // Any right padding that gives the convolution of the output the input's length describes
    // the same adjoint; this one leaves no remainder: (out + 2p - dil (k - 1) - 1) is a
    // multiple of the stride plus s - 1.
    a.pad_r[i] = p + s - 1 - op_i;
  }
  const int64_t c_out = w.shape()[1] * groups;
  if (b.defined()) {
    ADJOINT_CHECK(b.dim() == 1 && b.shape()[0] == c_out, Shape, op, "bias must have shape [", c_out,
                  "]: bias ", describe(b), " vs weight ", describe(w));
    ADJOINT_CHECK(detail::autocast_target(b.dtype(), AutocastPolicy::Lower) == xd, DType, op,
                  "bias must have the input's dtype: bias ", describe(b), " vs input ",
                  describe(x));
  }
  const Tensor y = detail::apply_conv_transpose(a, out_size, xb, w, b);
  return x.dim() == static_cast<int64_t>(d) + 1 ? y.squeeze(0) : y;
}

}  // namespace

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b, const ConvArg& stride,
              const ConvPadding& padding, const ConvArg& dilation, int64_t groups) {
  return convolution_nd(x, w, b, stride, padding, dilation, groups, 1, "conv1d");
}
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, const ConvArg& stride,
              const ConvPadding& padding, const ConvArg& dilation, int64_t groups) {
  return convolution_nd(x, w, b, stride, padding, dilation, groups, 2, "conv2d");
}
Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor& b, const ConvArg& stride,
              const ConvPadding& padding, const ConvArg& dilation, int64_t groups) {
  return convolution_nd(x, w, b, stride, padding, dilation, groups, 3, "conv3d");
}
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor& b, const ConvArg& stride,
                        const ConvArg& padding, const ConvArg& output_padding, int64_t groups,
                        const ConvArg& dilation) {
  return conv_transpose_nd(x, w, b, stride, padding, output_padding, groups, dilation, 1,
                           "conv_transpose1d");
}
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& b, const ConvArg& stride,
                        const ConvArg& padding, const ConvArg& output_padding, int64_t groups,
                        const ConvArg& dilation) {
  return conv_transpose_nd(x, w, b, stride, padding, output_padding, groups, dilation, 2,
                           "conv_transpose2d");
}

}  // namespace adjoint
