// Dense linear-algebra kernels through LAPACK (OpenBLAS's copy of it): solves, factorisations
// and decompositions of float32 and float64 matrices [..., m, n], looped over the leading
// (batch) dims. Like kernels.h they see plain tensors (no autograd), accept any strides and
// return contiguous row-major outputs. Failures that LAPACK reports through `info` (a singular
// matrix, one that is not positive definite, no convergence) are Value errors naming `op`,
// the batch index and the pivot or minor. The differentiable ops are in src/ops/linalg_*.cpp.
#pragma once

#include "adjoint/tensor.h"

namespace adjoint::kernels {

/// det(A) and its sign and log|det(A)| for A [..., n, n], from one LU factorisation (LAPACK
/// getrf): each is [...]. A singular A gives det 0, sign 0 and log|det| -inf (no error).
struct LuDet {
  Tensor det, sign, logabsdet;
};

/// Eigenvalues (ascending, [..., n]) and, when `vectors`, orthonormal eigenvectors (the
/// columns of [..., n, n]) of a symmetric A, from its lower triangle (LAPACK syevd).
struct Eigh {
  Tensor values, vectors;
};

/// The reduced QR decomposition of A [..., m, n], k = min(m, n): Q [..., m, k] with
/// orthonormal columns and an upper-triangular R [..., k, n] (LAPACK geqrf and orgqr).
struct Qr {
  Tensor q, r;
};

/// The reduced SVD A = U diag(S) Vh of A [..., m, n], k = min(m, n): U [..., m, k], S [..., k]
/// (descending, >= 0), Vh [..., k, n]; only S when !vectors (LAPACK gesdd).
struct Svd {
  Tensor u, s, vh;
};

// This family's kernels, declared once for the callers here and for each device's
// implementation (Note [The kernel table] in backend/device_kernels.h).
#include "backend/kernel_lists/linalg.inc"

}  // namespace adjoint::kernels
