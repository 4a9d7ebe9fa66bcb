// adjoint::linalg: differentiable dense linear algebra (torch.linalg's names and conventions):
// solves, factorisations and decompositions of float32 and float64 matrices, batched over
// leading dims, computed by LAPACK. Every function here has a VJP and a JVP written with ops,
// so double backward and forward-over-reverse work. matmul is in ops.h. See docs/linalg.md for
// the derivative formulas, the behaviour at singular points and the errors.
#pragma once

#include "adjoint/tensor.h"

namespace adjoint::linalg {

/// X with A X = B, for A [..., n, n] and B [..., n, k] (or a vector B [n]); batch dims
/// broadcast. A singular A is a Value error naming the batch element and the zero pivot.
Tensor solve(const Tensor& A, const Tensor& B);

/// X with A X = B for a triangular A [..., n, n]: only its upper (`upper`) or lower triangle
/// is read, and its diagonal is taken as ones when `unitriangular`. B is [..., n, k].
Tensor solve_triangular(const Tensor& A, const Tensor& B, bool upper, bool unitriangular = false);

/// The lower-triangular L with A = L Lᵀ of a symmetric positive-definite A [..., n, n] (only
/// its lower triangle is read). A matrix that is not positive definite is a Value error naming
/// the batch element and the order of the failing leading minor.
Tensor cholesky(const Tensor& A);

/// X with (L Lᵀ) X = B, given the Cholesky factor L [..., n, n] (lower) of A (torch's
/// cholesky_solve(B, L)). B is [..., n, k].
Tensor cholesky_solve(const Tensor& B, const Tensor& L);

/// A⁻¹ for A [..., n, n]; a singular A is an error, as in solve.
Tensor inv(const Tensor& A);

/// det(A), [...] for A [..., n, n] (0 for a singular A).
Tensor det(const Tensor& A);

/// sign(det A) and log|det A|, each [...]: finite where det itself would overflow. A singular
/// A gives sign 0 and logabsdet -inf. Only logabsdet is differentiable.
struct SlogdetResult {
  Tensor sign, logabsdet;
};
SlogdetResult slogdet(const Tensor& A);

/// Eigenvalues (ascending, [..., n]) and orthonormal eigenvectors (columns of [..., n, n]) of
/// a symmetric A (only its lower triangle is read): A = V diag(w) Vᵀ. A loss that uses the
/// eigenvectors has a non-finite gradient at repeated eigenvalues (one that uses only the
/// eigenvalues does not); eigvalsh is cheaper when only values are needed.
struct EighResult {
  Tensor eigenvalues, eigenvectors;
};
EighResult eigh(const Tensor& A);

/// The eigenvalues of eigh alone: differentiable everywhere, repeated eigenvalues included.
Tensor eigvalsh(const Tensor& A);

/// The reduced QR decomposition of A [..., m, n], k = min(m, n): Q [..., m, k] with orthonormal
/// columns and upper-triangular R [..., k, n]. Differentiable where the first k columns of A
/// are linearly independent.
struct QrResult {
  Tensor q, r;
};
QrResult qr(const Tensor& A);

/// The reduced SVD A = U diag(S) Vh of A [..., m, n], k = min(m, n): U [..., m, k], S [..., k]
/// (descending), Vh [..., k, n]. A loss that uses U or Vh has a non-finite gradient at
/// repeated singular values (or a zero one when m != n); svdvals is cheaper for values only.
struct SvdResult {
  Tensor u, s, vh;
};
SvdResult svd(const Tensor& A);

/// The singular values of svd alone: differentiable wherever they are distinct.
Tensor svdvals(const Tensor& A);

/// The least-squares solution X of A X ≈ B for A [..., m, n] of full rank and B [..., m, k]:
/// argmin |A X - B| when m >= n, the minimum-norm solution when m < n. Computed by QR (so
/// differentiable through qr and solve_triangular). A rank-deficient A is a Value error.
Tensor lstsq(const Tensor& A, const Tensor& B);

/// The matrix exponential of A [..., n, n] (scaling and squaring with a degree-13 Padé
/// approximant, Higham 2005), written with matmul and solve, so it is differentiable.
Tensor matrix_exp(const Tensor& A);

}  // namespace adjoint::linalg
