// Convolutions with PyTorch's signatures and semantics (torch.nn.functional.conv1d/2d/3d and
// conv_transpose1d/2d): batched inputs [N, C, *spatial] or unbatched [C, *spatial], weights
// [out, in / groups, *kernel] (transposed: [in, out / groups, *kernel]), an optional bias,
// stride, padding (numbers, "same" or "valid"), dilation and groups. Differentiable to any
// order, under every transform, compile and export; float32 and bfloat16 run on oneDNN where it
// is built. See docs/vision.md.
#pragma once

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint {

/// A per-spatial-dim argument of a convolution (stride, dilation, numeric padding): one number
/// for every dim (`2`) or one per dim (`{2, 1}`).
class ConvArg {
 public:
  template <std::integral I>
  ConvArg(I v) : values_{static_cast<int64_t>(v)} {}  // NOLINT(google-explicit-constructor)
  ConvArg(std::initializer_list<int64_t> v) : values_(v) {}
  ConvArg(std::vector<int64_t> v) : values_(std::move(v)) {}  // NOLINT
  const std::vector<int64_t>& values() const { return values_; }

 private:
  std::vector<int64_t> values_;
};

/// A convolution's padding: numbers as ConvArg (zeros added on both sides), or "valid" (none)
/// or "same" (the output as long as the input; stride 1 only; an odd total padding puts the
/// extra element on the right, as PyTorch does).
class ConvPadding {
 public:
  template <std::integral I>
  ConvPadding(I v) : values_{static_cast<int64_t>(v)} {}  // NOLINT
  ConvPadding(std::initializer_list<int64_t> v) : values_(v) {}
  ConvPadding(std::vector<int64_t> v) : values_(std::move(v)) {}  // NOLINT
  ConvPadding(const char* mode) : mode_(mode ? mode : "") {}      // NOLINT
  ConvPadding(std::string mode) : mode_(std::move(mode)) {}       // NOLINT
  bool is_mode() const { return !mode_.empty() || values_.empty(); }
  const std::string& mode() const { return mode_; }
  const std::vector<int64_t>& values() const { return values_; }

 private:
  std::vector<int64_t> values_;
  std::string mode_;
};

/// y[n, o, l] = bias[o] + Σ_{c in o's group, k} x[n, c, l stride - pad + k dilation] w[o, c', k].
/// input [N, C, L] or [C, L]; weight [O, C / groups, K]; bias [O] or undefined.
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
              const ConvArg& stride = 1, const ConvPadding& padding = 0,
              const ConvArg& dilation = 1, int64_t groups = 1);
/// As conv1d over two spatial dims: input [N, C, H, W] or [C, H, W], weight [O, C / groups, kH,
/// kW]. Depthwise: groups = C (and O a multiple of C).
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
              const ConvArg& stride = 1, const ConvPadding& padding = 0,
              const ConvArg& dilation = 1, int64_t groups = 1);
/// As conv1d over three spatial dims: input [N, C, D, H, W] or [C, D, H, W].
Tensor conv3d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
              const ConvArg& stride = 1, const ConvPadding& padding = 0,
              const ConvArg& dilation = 1, int64_t groups = 1);

/// The transposed convolution (the gradient of conv1d with respect to its input, plus a bias):
/// input [N, C_in, L] or [C_in, L], weight [C_in, O / groups, K], bias [O] or undefined; the
/// output length is (L - 1) stride - 2 padding + dilation (K - 1) + output_padding + 1, and
/// output_padding must be smaller than the stride or the dilation. Note PyTorch's argument
/// order: groups comes before dilation.
Tensor conv_transpose1d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                        const ConvArg& stride = 1, const ConvArg& padding = 0,
                        const ConvArg& output_padding = 0, int64_t groups = 1,
                        const ConvArg& dilation = 1);
/// As conv_transpose1d over two spatial dims: input [N, C_in, H, W] or [C_in, H, W], weight
/// [C_in, O / groups, kH, kW].
Tensor conv_transpose2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {},
                        const ConvArg& stride = 1, const ConvArg& padding = 0,
                        const ConvArg& output_padding = 0, int64_t groups = 1,
                        const ConvArg& dilation = 1);

}  // namespace adjoint
