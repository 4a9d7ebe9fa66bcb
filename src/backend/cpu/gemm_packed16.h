// A matrix product of 16-bit operands with float32 accumulation that reads the operands as they
// are: blocks of them are widened to float32 while being packed for an AVX2/FMA micro-kernel,
// so no widened copy of a whole operand is ever written (Note [Packed 16-bit products]).
#pragma once

#include <cstdint>

#include "adjoint/half.h"

namespace adjoint::kernels {

/// Whether this CPU runs the packed kernel: AVX2, FMA and F16C (after the ISA cap, Note [The ISA
/// cap]).
bool gemm_packed16_supported();

/// C = A B + beta C (beta 0 or 1) for one product on the calling thread, in gemm_bf16.h's
/// layout: A is m x k (element (i, p) at a[i * lda + p], or at a[p * lda + i] when trans_a), B is
/// k x n likewise, C is float32 m x n with row stride ldc. Needs gemm_packed16_supported; m, n
/// and k may be anything from 1 (k = 0 is the caller's).
template <class H>
void gemm_packed16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const H* a,
                   int64_t lda, const H* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// The longest k gemm_packed16_add_rounded takes: the kernel's k block, so that each sum is
/// complete in registers when it is rounded.
inline constexpr int64_t kPackedAddRoundedMaxK = 256;

/// C += widen(round16(A B)) for float32 C, 0 < k <= kPackedAddRoundedMaxK, in the layout above:
/// the bits of rounding gemm_packed16's product to H and adding it (a weight gradient through
/// autocast's cast, Note [Adding into .grad through a cast]), in one pass over C.
template <class H>
void gemm_packed16_add_rounded(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                               const H* a, int64_t lda, const H* b, int64_t ldb, float* c,
                               int64_t ldc);

extern template void gemm_packed16<BFloat16>(bool, bool, int64_t, int64_t, int64_t, const BFloat16*,
                                             int64_t, const BFloat16*, int64_t, float, float*,
                                             int64_t);
extern template void gemm_packed16<Half>(bool, bool, int64_t, int64_t, int64_t, const Half*,
                                         int64_t, const Half*, int64_t, float, float*, int64_t);
extern template void gemm_packed16_add_rounded<BFloat16>(bool, bool, int64_t, int64_t, int64_t,
                                                         const BFloat16*, int64_t, const BFloat16*,
                                                         int64_t, float*, int64_t);
extern template void gemm_packed16_add_rounded<Half>(bool, bool, int64_t, int64_t, int64_t,
                                                     const Half*, int64_t, const Half*, int64_t,
                                                     float*, int64_t);

}  // namespace adjoint::kernels
