// Convolution kernels over 1, 2 or 3 spatial dims (conv1d/2d/3d and the transposed ones are all
// built on these three): the forward, the gradient with respect to the input (backward-data,
// which is also the transposed convolution's forward) and the gradient with respect to the
// weight (backward-weights). Each has two paths: oneDNN's convolution primitives (float32 and
// bfloat16, Note [Convolution memory format] in cpu/conv_onednn.cpp) and a plain direct loop
// (every floating dtype), the oracle the oneDNN path is tested against and the path taken when
// oneDNN is not built. Like the other kernels they see plain tensors (no autograd), accept any
// strides and allocate their outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint::kernels {

/// How a convolution walks its input, one entry per spatial dim (all vectors the same length:
/// 1, 2 or 3). The padding may differ on the two sides ("same" with an even kernel).
struct ConvGeometry {
  std::vector<int64_t> stride, pad_l, pad_r, dilation;
  int64_t groups = 1;
};

/// Output length of one spatial dim: floor((in + pl + pr - dilation (k - 1) - 1) / stride) + 1
/// (may be <= 0 when the kernel does not fit; callers check).
int64_t conv_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad_l, int64_t pad_r,
                         int64_t dilation);

/// Which implementation runs: Auto picks oneDNN where it supports the dtype, else the
/// reference loop; tests force each.
enum class ConvPath { Auto, Reference, OneDnn };

/// Whether the oneDNN path can run `dtype` here (float32; bfloat16 where oneDNN has an ISA
/// for it; never without oneDNN).
bool conv_onednn_supports(DType dtype);

/// The name of the path Auto takes for `dtype` ("onednn:<isa>" or "reference"), for reports.
const char* conv_path_name(DType dtype);

// This family's kernels, declared once for the callers here and for each device's
// implementation (Note [The kernel table] in backend/device_kernels.h).
#include "backend/kernel_lists/conv.inc"

}  // namespace adjoint::kernels
