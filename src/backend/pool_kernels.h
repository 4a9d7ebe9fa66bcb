// Pooling and im2col kernels (src/backend/cpu/pool.cpp): max pooling's argmax, average pooling
// and its transpose, the gather and scatter of a plane at pooling indices, and im2col/col2im.
// Like the kernels in kernels.h they see plain tensors (no autograd), accept any strides on
// input (copying to contiguous first) and allocate contiguous outputs. Every kernel works on
// the trailing two (spatial) dims of its input; all leading dims are planes, run in parallel
// with a fixed partition, and each plane is computed by one thread in a fixed order, so the
// results do not depend on the thread count. float16/bfloat16 inputs are computed in float32.
#pragma once

#include <cstdint>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint::kernels {

/// One spatial axis of a pooling. Output position o reads the input positions start[o],
/// start[o] + step, ... (count[o] of them, all in [0, in), count[o] >= 1); padded[o] is the
/// window's length with its padding (average pooling's count_include_pad divisor).
struct PoolAxis {
  int64_t in = 1;
  int64_t step = 1;
  std::vector<int64_t> start, count, padded;
  int64_t out() const { return static_cast<int64_t>(start.size()); }
};

/// The windows of a 2-d pooling (a 1-d pooling is one of height 1) and average pooling's
/// divisor: divisor_override when it is not 0, else the product of the axes' padded lengths
/// (include_pad) or of their counts.
struct PoolWindows {
  PoolAxis h, w;
  bool include_pad = true;
  int64_t divisor_override = 0;
  double divisor(int64_t oh, int64_t ow) const {
    if (divisor_override != 0) return static_cast<double>(divisor_override);
    return include_pad ? static_cast<double>(h.padded[oh] * w.padded[ow])
                       : static_cast<double>(h.count[oh] * w.count[ow]);
  }
};

/// For floating x [..., H, W]: int64 [..., OH, OW], the flat index h * W + w of each window's
/// maximum, the first in row-major order among ties, and NaN wins over any number (the last
/// NaN), as PyTorch's max pooling.
Tensor max_pool_indices(const Tensor& x, const PoolWindows& win);
/// For floating x [..., H, W]: [..., OH, OW], each window's sum (row-major order) divided by
/// win.divisor(oh, ow).
Tensor avg_pool(const Tensor& x, const PoolWindows& win);
/// The transpose of avg_pool: g [..., OH, OW] to [..., H, W], each g / divisor added to its
/// window's elements (outputs in row-major order).
Tensor avg_pool_backward(const Tensor& g, const PoolWindows& win);

/// x [..., S...] and int64 index [..., O...] with the same leading dims (`spatial` trailing
/// dims each): out[p, k] = x[p, index[p, k]] with each plane flattened. Indices are checked
/// against the plane's size; errors name `op`.
Tensor pool_gather(const Tensor& x, const Tensor& index, int64_t spatial, const char* op);
/// The transpose of pool_gather: g [..., O...] added into zeros [..., plane] at index, the
/// plane being the trailing `plane` shape (outputs in row-major order within each plane).
Tensor pool_scatter(const Tensor& g, const Tensor& index, const Shape& plane, const char* op);

/// The geometry of im2col: kernel, stride, padding and dilation, each (h, w).
struct Im2ColGeometry {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t out_h(int64_t h) const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  int64_t out_w(int64_t w) const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
};
/// x [N, C, H, W] to [N, C * kh * kw, OH * OW]: column (oh, ow), row (c, i, j) holds
/// x[n, c, oh * sh - ph + i * dh, ow * sw - pw + j * dw], 0 outside the input.
Tensor im2col(const Tensor& x, const Im2ColGeometry& g);
/// The transpose of im2col: cols [N, C * kh * kw, OH * OW] summed into [N, C, H, W].
Tensor col2im(const Tensor& cols, const Im2ColGeometry& g, int64_t h, int64_t w);

}  // namespace adjoint::kernels
