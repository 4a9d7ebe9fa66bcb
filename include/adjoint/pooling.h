// Pooling and resampling ops for images and sequences, with PyTorch's semantics
// (torch.nn.functional): max and average pooling (1-d and 2-d, adaptive 2-d), pad,
// interpolate, pixel_shuffle and pixel_unshuffle, and unfold/fold (im2col). Inputs are batched
// [N, C, *spatial] or unbatched [C, *spatial]; integer inputs are converted to the default float
// dtype. Every op is differentiable to any order, batches under vmap and traces under compile.
// See docs/vision.md, "Pooling and resampling".
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint {

// ---- pooling (src/ops/pooling.cpp) ----
// Sizes given as a list take one value for every spatial dim or one per dim ({2} or {2, 3});
// an empty stride means the kernel size. Padding is implicit: -inf for max pooling, zeros for
// average pooling, and at most half the kernel. ceil_mode rounds the output size up, keeping
// only windows that start inside the input or its left padding.

/// Max over each window of x [N, C, L] or [C, L].
Tensor max_pool1d(const Tensor& x, int64_t kernel_size, std::optional<int64_t> stride = {},
                  int64_t padding = 0, int64_t dilation = 1, bool ceil_mode = false);
/// max_pool1d and the index (into L) of each window's maximum, as return_indices = true.
std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, int64_t kernel_size,
                                                  std::optional<int64_t> stride = {},
                                                  int64_t padding = 0, int64_t dilation = 1,
                                                  bool ceil_mode = false);
/// Max over each window of x [N, C, H, W] or [C, H, W]. The gradient goes to the first
/// maximum of a window in row-major order (a NaN is the maximum), as PyTorch's.
Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel_size,
                  std::vector<int64_t> stride = {}, std::vector<int64_t> padding = {0},
                  std::vector<int64_t> dilation = {1}, bool ceil_mode = false);
/// max_pool2d and the int64 index of each maximum into its plane (h * W + w), as
/// return_indices = true.
std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, std::vector<int64_t> kernel_size,
                                                  std::vector<int64_t> stride = {},
                                                  std::vector<int64_t> padding = {0},
                                                  std::vector<int64_t> dilation = {1},
                                                  bool ceil_mode = false);
/// Mean over each window of x [N, C, L] or [C, L]; count_include_pad counts the padding
/// zeros in the divisor.
Tensor avg_pool1d(const Tensor& x, int64_t kernel_size, std::optional<int64_t> stride = {},
                  int64_t padding = 0, bool ceil_mode = false, bool count_include_pad = true);
/// Mean over each window of x [N, C, H, W] or [C, H, W]; divisor_override (non-zero) replaces
/// the window's size as the divisor.
Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel_size,
                  std::vector<int64_t> stride = {}, std::vector<int64_t> padding = {0},
                  bool ceil_mode = false, bool count_include_pad = true,
                  std::optional<int64_t> divisor_override = {});
/// Mean over output_size windows of x [N, C, H, W] or [C, H, W]: output (i, j) covers rows
/// [floor(i H / OH), ceil((i + 1) H / OH)) and the columns alike.
Tensor adaptive_avg_pool2d(const Tensor& x, std::vector<int64_t> output_size);
/// Max over adaptive_avg_pool2d's windows.
Tensor adaptive_max_pool2d(const Tensor& x, std::vector<int64_t> output_size);
std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x,
                                                           std::vector<int64_t> output_size);

// ---- resampling (src/ops/resample.cpp) ----

enum class PadMode : uint8_t { Constant, Reflect, Replicate, Circular };
/// Pads (or, with negative entries, crops) the trailing dims of x: `pad` holds (left, right)
/// pairs, the last dim's first, as torch.nn.functional.pad. Constant pads any number of dims
/// with `value`; reflect (mirror without repeating the edge), replicate (repeat the edge) and
/// circular (wrap around) pad 1 to 3 trailing dims of an input with one or two more dims.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, PadMode mode = PadMode::Constant,
           double value = 0);

enum class InterpolateMode : uint8_t { Nearest, Linear, Bilinear };
struct InterpolateOptions {
  /// The output's spatial size (one value for every dim, or one per dim); or
  std::vector<int64_t> size;
  /// the factor each spatial size is multiplied by (output floor(in * factor)).
  std::vector<double> scale_factor;
  InterpolateMode mode = InterpolateMode::Nearest;
  /// Linear modes only: the corner pixels' centres of input and output are aligned.
  std::optional<bool> align_corners;
  /// With scale_factor: the source index uses in / out instead of 1 / scale_factor.
  bool recompute_scale_factor = false;
};
/// Resizes the spatial dims of x [N, C, L] or [N, C, H, W]: nearest (1-d or 2-d), linear
/// (3-d input) or bilinear (4-d input), with PyTorch's source-index formulas.
Tensor interpolate(const Tensor& x, const InterpolateOptions& options);

/// [*, C r², H, W] to [*, C, H r, W r]: element (c, i, j) of output block (h, w) is input
/// channel c r² + i r + j at (h, w).
Tensor pixel_shuffle(const Tensor& x, int64_t upscale_factor);
/// The inverse of pixel_shuffle: [*, C, H r, W r] to [*, C r², H, W].
Tensor pixel_unshuffle(const Tensor& x, int64_t downscale_factor);

/// im2col: the sliding kernel_size blocks of x [N, C, H, W] (or [C, H, W]) as columns,
/// [N, C * kh * kw, L] with L the number of blocks, rows ordered (c, i, j), as
/// torch.nn.functional.unfold.
Tensor unfold(const Tensor& x, std::vector<int64_t> kernel_size,
              std::vector<int64_t> dilation = {1}, std::vector<int64_t> padding = {0},
              std::vector<int64_t> stride = {1});
/// col2im, the transpose of unfold: blocks [N, C * kh * kw, L] (or [C * kh * kw, L]) summed
/// into [N, C, *output_size], overlapping elements added, as torch.nn.functional.fold.
Tensor fold(const Tensor& x, std::vector<int64_t> output_size, std::vector<int64_t> kernel_size,
            std::vector<int64_t> dilation = {1}, std::vector<int64_t> padding = {0},
            std::vector<int64_t> stride = {1});

}  // namespace adjoint
