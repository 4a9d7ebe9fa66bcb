// bfloat16 matrix products with float32 accumulation on oneDNN's matmul primitive, for CPUs that
// multiply bfloat16 natively (Note [bfloat16 matmul]). gemm16.h chooses between this and the
// other 16-bit paths and splits products over the pool.
#pragma once

#include <cstdint>
#include <string>

#include "adjoint/half.h"

namespace adjoint::kernels {

/// Whether this build and CPU can run the oneDNN path (AVX512-BF16 or AMX, after the ISA caps).
bool bf16_gemm_onednn_usable();
/// "onednn:" and oneDNN's ISA ("avx512_core_bf16", "avx512_core_amx").
std::string bf16_gemm_onednn_name();

/// C = A B + beta C (beta 0 or 1) for one product on the calling thread, never split, in
/// row-major storage: A is m x k (element (i, p) at a[i * lda + p], or at a[p * lda + i] when
/// trans_a), B is k x n likewise, C is float32 m x n with row stride ldc; k > 0. Needs
/// bf16_gemm_onednn_usable.
void gemm_bf16_onednn(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta,
                      float* c, int64_t ldc);

}  // namespace adjoint::kernels
