// The elementwise kernels' thread grains, and their float16/bfloat16 fast paths (Note
// [Reduced-precision blocks] in elementwise_reduced.cpp): internal to the CPU backend.
#pragma once

#include <cstdint>

#include "adjoint/tensor.h"
#include "backend/kernels.h"

namespace adjoint::kernels {

// Elements per thread below which threads cost more than they save. Waking a sleeping pool
// thread can take tens of microseconds (an idle vCPU), as long as a memory-bound pass over 1 MiB,
// so tensors under 2^19 elements run on one thread: a 2.5x shorter AdamW step for gpt-tiny.
inline constexpr int64_t kFlatGrain = 262144;
// Conversions to and from 16 bits sit between the matrix products of a mixed-precision step,
// where the pool's threads have just finished a product and are still awake, and a bfloat16
// weight or activation of 2^16 to 2^18 elements is common: they split from 2^15 elements.
inline constexpr int64_t kConvertGrain = 32768;

/// out = k(x) in float32 blocks, for a kind with a floating result (not a comparison), when x
/// and out are contiguous, of one shape and one 16-bit dtype; false (nothing written) otherwise.
bool unary_reduced_blocked(Unary k, const Tensor& out, const Tensor& x, double a, double b);
/// out = k(x, y) in float32 blocks, for an arithmetic kind, when x, y and out share one 16-bit
/// dtype and x and out are contiguous of one shape, and y too or y is one element; false
/// (nothing written) otherwise.
bool binary_reduced_blocked(Binary k, const Tensor& out, const Tensor& x, const Tensor& y);
/// out[i] += float(H(x[i])) for i < n, on the calling thread: x rounded to the 16-bit H, widened
/// and added, in L1 blocks.
template <class H>
void add_rounded_into(float* out, const float* x, int64_t n);

}  // namespace adjoint::kernels
