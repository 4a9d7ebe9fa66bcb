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

/// The geometry of im2col: kernel, stride, padding and dilation, each (h, w).
struct Im2ColGeometry {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  int64_t out_h(int64_t h) const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  int64_t out_w(int64_t w) const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
};

// This family's kernels, declared once for the callers here and for each device's
// implementation (Note [The kernel table] in backend/device_kernels.h).
#include "backend/kernel_lists/pool.inc"

}  // namespace adjoint::kernels
