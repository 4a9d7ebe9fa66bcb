// Dense linear-algebra kernels through LAPACK (OpenBLAS's copy of it): solves, factorisations
// and decompositions of float32 and float64 matrices [..., m, n], looped over the leading
// (batch) dims. Like kernels.h they see plain tensors (no autograd), accept any strides and
// return contiguous row-major outputs. Failures that LAPACK reports through `info` (a singular
// matrix, one that is not positive definite, no convergence) are Value errors naming `op`,
// the batch index and the pivot or minor. The differentiable ops are in src/ops/linalg_*.cpp.
#pragma once

#include "adjoint/tensor.h"

namespace adjoint::kernels {

/// X = A⁻¹ B for A [..., n, n] and B [..., n, k] with equal batch dims (LU with partial
/// pivoting, LAPACK gesv). A singular A is an error.
Tensor lu_solve(const Tensor& a, const Tensor& b, const char* op);

/// X = A⁻¹ B for a triangular A [..., n, n] (only its upper or lower triangle is read; a unit
/// diagonal is assumed, not read, when unit_diagonal) and B [..., n, k] (LAPACK trtrs). A zero
/// on the diagonal is an error.
Tensor triangular_solve(const Tensor& a, const Tensor& b, bool upper, bool unit_diagonal,
                        const char* op);

/// The lower Cholesky factor L (A = L Lᵀ) of a symmetric positive-definite A [..., n, n], from
/// its lower triangle (LAPACK potrf); the strictly upper part of L is zero.
Tensor cholesky(const Tensor& a, const char* op);

/// det(A) and its sign and log|det(A)| for A [..., n, n], from one LU factorisation (LAPACK
/// getrf): each is [...]. A singular A gives det 0, sign 0 and log|det| -inf (no error).
struct LuDet {
  Tensor det, sign, logabsdet;
};
LuDet lu_det(const Tensor& a, const char* op);

/// adj(A)ᵀ for A [..., n, n]: det(A) A⁻ᵀ where |det A| > tol · prod_i |row_i|, else from the
/// SVD (Note [det's cofactors, matrix by matrix] in cpu/lapack.cpp). Non-finite entries at a
/// matrix that needs the SVD are an error.
Tensor det_cofactors(const Tensor& a, double tol, const char* op);

/// Eigenvalues (ascending, [..., n]) and, when `vectors`, orthonormal eigenvectors (the
/// columns of [..., n, n]) of a symmetric A, from its lower triangle (LAPACK syevd).
struct Eigh {
  Tensor values, vectors;
};
Eigh eigh(const Tensor& a, bool vectors, const char* op);

/// The reduced QR decomposition of A [..., m, n], k = min(m, n): Q [..., m, k] with
/// orthonormal columns and an upper-triangular R [..., k, n] (LAPACK geqrf and orgqr).
struct Qr {
  Tensor q, r;
};
Qr qr(const Tensor& a, const char* op);

/// The reduced SVD A = U diag(S) Vh of A [..., m, n], k = min(m, n): U [..., m, k], S [..., k]
/// (descending, >= 0), Vh [..., k, n]; only S when !vectors (LAPACK gesdd).
struct Svd {
  Tensor u, s, vh;
};
Svd svd(const Tensor& a, bool vectors, const char* op);

}  // namespace adjoint::kernels
