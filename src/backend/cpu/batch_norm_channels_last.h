// Batch norm's kernels on a channels-last input (core/memory_format.h), read and written in place:
// the input is M = N prod(sp) rows of C contiguous channels, and every output of x's shape keeps
// that layout. batch_norm.cpp calls these for such inputs; the plain [N, C, S] kernels are there.
// Float32 and float64 only (16-bit inputs are widened by the caller, keeping the layout).
#pragma once

#include <cstdint>

#include "adjoint/tensor.h"
#include "backend/norm_kernels.h"

namespace adjoint::kernels::bn_cl {

/// batch_norm_moments for channels-last x.
Tensor moments(const Tensor& x, int64_t correction);
/// batch_norm for channels-last x; y is channels-last.
BatchNormForward forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
/// batch_norm_backward for channels-last x (gy of another layout is copied to x's first); the
/// result is channels-last.
Tensor backward(const Tensor& gy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                const Tensor& rstd);
/// t (channels-last) cast to dtype in the same layout, in one contiguous pass over its memory.
Tensor cast_keeping_layout(const Tensor& t, DType dtype);

}  // namespace adjoint::kernels::bn_cl
