// float32 matrix products: OpenBLAS's sgemm, or oneDNN's where OpenBLAS runs kernels older
// than the CPU (Note [OpenBLAS's core] in sgemm.cpp) and for large products on AVX-512 CPUs
// (Note [float32 products by size]). gemm.cpp splits products over the pool and calls sgemm()
// for each piece.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace adjoint::kernels {

enum class SgemmPath {
  OpenBlas,
  OneDnn,
  BySize,  // oneDNN for products by_size_takes_onednn accepts, OpenBLAS for the others
};

/// The path float32 products take now (chosen once, unless set_sgemm_path forces one).
SgemmPath sgemm_path();
/// For reports: "openblas:Haswell", "onednn:avx512_core (OpenBLAS core Prescott)", or
/// "openblas:Cooperlake, onednn:avx512_core_bf16 for large products".
std::string sgemm_path_name();
/// Whether this build can run float32 products on oneDNN.
bool sgemm_onednn_usable();
/// For tests and benchmarks: forces a path (OneDnn and BySize need oneDNN); returns the
/// previous one.
SgemmPath set_sgemm_path(SgemmPath path);

/// The default rule, apart from ADJOINT_SGEMM (openblas, onednn or bysize), where oneDNN is in
/// the build: oneDNN when OpenBLAS has chosen a core without AVX2 kernels on a CPU that has AVX2
/// and FMA; by size on AVX-512 CPUs; OpenBLAS otherwise.
SgemmPath choose_sgemm_path(std::string_view openblas_core, bool cpu_has_avx2, bool cpu_has_avx512,
                            bool onednn_usable);
/// On the BySize path: whether one single-threaded product of this shape runs on oneDNN.
bool by_size_takes_onednn(int64_t m, int64_t n, int64_t k);

/// Where OpenBLAS runs kernels without AVX2 on a CPU that has AVX2 (Note [OpenBLAS's core]): what
/// to set so that float64 products and LAPACK, which stay on OpenBLAS, are fast too. Empty
/// elsewhere. warn_if_openblas_core_is_old() prints it on stderr, once per process.
std::string openblas_core_advice(std::string_view openblas_core, bool cpu_has_avx2,
                                 bool cpu_has_avx512, bool cpu_has_avx512_bf16);
void warn_if_openblas_core_is_old();

/// C = A B + beta C on the calling thread alone, row-major: A is m x k (element (i, p) at
/// a[i * lda + p], or at a[p * lda + i] when trans_a), B is k x n likewise, C is m x n with row
/// stride ldc.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// The same product for kernels made of many small ones of a fixed shape (the attention
/// kernel's 64 x 64 blocks): on oneDNN on the OneDnn and BySize paths whatever the size, on
/// OpenBLAS on the OpenBlas path. On an AVX-512 CPU (Zen 5) oneDNN ran attention's blocks in
/// 0.6x OpenBLAS's time (Note [Attention block products] in attention.cpp), where the by-size
/// rule, measured on whole matmuls, would keep them on OpenBLAS.
void sgemm_block(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace adjoint::kernels
