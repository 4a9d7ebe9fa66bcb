// bfloat16 matrix products with float32 accumulation on oneDNN, for CPUs that multiply bfloat16
// natively (Note [bfloat16 matmul]); elsewhere gemm.cpp widens the operands and runs sgemm.
#pragma once

#include <cstdint>
#include <string>

#include "adjoint/half.h"
#include "adjoint/tensor.h"

namespace adjoint::kernels {

enum class Bf16GemmPath { OneDnn, Sgemm };

/// The path bfloat16 products take now, and a name for reports ("onednn:avx512_core_amx",
/// "onednn:avx512_core_bf16" or "sgemm").
Bf16GemmPath bf16_gemm_path();
std::string bf16_gemm_path_name();
/// Whether this build and CPU can run the oneDNN path.
bool bf16_gemm_onednn_usable();
/// For tests and benchmarks: forces a path (OneDnn must be usable); returns the previous one.
Bf16GemmPath set_bf16_gemm_path(Bf16GemmPath path);

// The kernels of kernels.h for bfloat16 operands on the oneDNN path (bf16_gemm_path() is
// OneDnn): float32 accumulation, the bias added in float32, one rounding to bfloat16.
Tensor matmul_bf16(const Tensor& a, const Tensor& b);
/// matmul_bf16's float32 product, before its rounding to bfloat16.
Tensor matmul_bf16_unrounded(const Tensor& a, const Tensor& b);
Tensor linear_bf16(const Tensor& x, const Tensor& w, const Tensor& bias);
void matmul_add_into_bf16(const Tensor& c, const Tensor& a, const Tensor& b);

/// C = A B + beta C (beta 0 or 1) for one product in row-major storage: A is m x k (element (i, p)
/// at a[i * lda + p], or at a[p * lda + i] when trans_a), B is k x n likewise, C is float32 m x n
/// with row stride ldc. Split over adjoint's pool when large (Note [Gemm threading]).
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const BFloat16* a,
               int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// The same, never split (one product of a batch already running on a pool thread).
void gemm_bf16_single(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      const BFloat16* a, int64_t lda, const BFloat16* b, int64_t ldb, float beta,
                      float* c, int64_t ldc);

}  // namespace adjoint::kernels
