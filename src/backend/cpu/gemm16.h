// Matrix products of 16-bit operands (bfloat16, float16) with float32 accumulation, and which of
// three paths each dtype takes (Note [Reduced-precision matmul] in gemm.cpp): oneDNN's bfloat16
// matmul where the CPU multiplies bfloat16 (gemm_bf16.h), the packed AVX2 kernel that widens
// while it packs (gemm_packed16.h), or else widened float32 copies and sgemm (gemm.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "adjoint/dtype.h"
#include "adjoint/half.h"
#include "adjoint/tensor.h"

namespace adjoint::kernels {

enum class Gemm16Path { OneDnn, Packed, Widened };

/// The path products of this 16-bit dtype take now, and a name for reports
/// ("onednn:avx512_core_amx", "packed:avx2" or "sgemm").
Gemm16Path gemm16_path(DType dtype);
std::string gemm16_path_name(DType dtype);
/// Whether this build and CPU can run the path for the dtype (OneDnn: bfloat16 only).
bool gemm16_path_usable(DType dtype, Gemm16Path path);
/// For tests and benchmarks: forces the dtype's path (which must be usable); returns the
/// previous one.
Gemm16Path set_gemm16_path(DType dtype, Gemm16Path path);

// The kernels of kernels.h for 16-bit operands on a path other than Widened: float32
// accumulation, a bias added in float32, one rounding to the 16-bit dtype.
Tensor matmul16(const Tensor& a, const Tensor& b);
/// matmul16's float32 product, before its rounding.
Tensor matmul16_unrounded(const Tensor& a, const Tensor& b);
Tensor linear16(const Tensor& x, const Tensor& w, const Tensor& bias);
void matmul_add_into16(const Tensor& c, const Tensor& a, const Tensor& b);
/// c += widen(round16(a b)) for a contiguous float32 c on the packed path, k at most
/// kPackedAddRoundedMaxK (gemm_packed16.h): the rounding and the add in the kernel's store.
void matmul_add_rounded_into16(const Tensor& c, const Tensor& a, const Tensor& b);

/// C = A B + beta C (beta 0 or 1) for one product on the dtype's path, in the layout of
/// gemm_packed16.h. gemm16 splits large products over adjoint's pool (Note [Gemm threading]);
/// gemm16_single runs on the calling thread (a piece of a batch already on a pool thread).
template <class H>
void gemm16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const H* a, int64_t lda,
            const H* b, int64_t ldb, float beta, float* c, int64_t ldc);
template <class H>
void gemm16_single(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const H* a,
                   int64_t lda, const H* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace adjoint::kernels
