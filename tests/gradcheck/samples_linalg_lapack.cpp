// Gradcheck samples for adjoint::linalg (src/ops/linalg_*.cpp), named "linalg/<op>/<case>".
// Inputs are kept away from the singular points: square matrices get + 4 I (well conditioned),
// symmetric positive-definite ones are X Xᵀ + 3 I, and eigh / svd samples have distinct
// eigenvalues or singular values. cholesky and eigh read one triangle, so their samples build
// a symmetric A from X (see Note [Symmetric inputs] in src/ops/linalg_solve.cpp).
#include "support/registry.h"

namespace {

using namespace adjoint;
using namespace adjoint::testing;

Tensor eye_of(const Tensor& x) { return eye(x.size(-1), std::nullopt, x.dtype()); }
/// x + 4 I: random square matrices made comfortably invertible.
Tensor shifted(const Tensor& x) { return x + eye_of(x) * 4.0; }
/// x xᵀ + 3 I: symmetric positive definite.
Tensor spd(const Tensor& x) { return matmul(x, x.transpose(-2, -1)) + eye_of(x) * 3.0; }
/// x + xᵀ: symmetric, with distinct eigenvalues for the random x used here.
Tensor symmetric(const Tensor& x) { return x + x.transpose(-2, -1); }
/// Several results as one flat tensor (a sample returns one tensor).
Tensor flat(std::vector<Tensor> parts) {
  for (Tensor& p : parts) p = p.flatten();
  return cat(parts, 0);
}

}  // namespace

ADJOINT_REGISTER_SAMPLES(linalg_lapack) {
  auto solve = [](const Inputs& x) { return linalg::solve(shifted(x[0]), x[1]); };
  sink.add("linalg/solve/matrix", solve, {randn64({3, 3}), randn64({3, 2})});
  sink.add("linalg/solve/vector", solve, {randn64({3, 3}), randn64({3})});
  sink.add("linalg/solve/batch", solve, {randn64({2, 3, 3}), randn64({2, 3, 2})});
  sink.add("linalg/solve/broadcast_b", solve, {randn64({2, 3, 3}), randn64({3, 2})});
  sink.add("linalg/solve/broadcast_a", solve, {randn64({3, 3}), randn64({2, 1, 3, 1})});
  sink.add("linalg/solve/noncontiguous", solve, {randn64({3, 3}).t(), randn64({2, 3}).t()});
  sink.add("linalg/solve/empty_batch", solve, {randn64({0, 3, 3}), randn64({0, 3, 2})});
  sink.add("linalg/solve/constant_a", solve, {constant(randn64({3, 3})), randn64({3, 2})});
  sink.add("linalg/solve/constant_b", solve, {randn64({3, 3}), constant(randn64({3, 2}))});

  auto lower = [](const Inputs& x) { return linalg::solve_triangular(shifted(x[0]), x[1], false); };
  auto upper = [](const Inputs& x) { return linalg::solve_triangular(shifted(x[0]), x[1], true); };
  auto unit = [](const Inputs& x) {
    return linalg::solve_triangular(x[0], x[1], false, /*unitriangular=*/true);
  };
  sink.add("linalg/solve_triangular/lower", lower, {randn64({3, 3}), randn64({3, 2})});
  sink.add("linalg/solve_triangular/upper", upper, {randn64({3, 3}), randn64({3, 2})});
  sink.add("linalg/solve_triangular/unit", unit, {randn64({3, 3}), randn64({3, 2})});
  sink.add("linalg/solve_triangular/batch_broadcast", upper, {randn64({2, 3, 3}), randn64({3, 1})});
  sink.add("linalg/solve_triangular/noncontiguous", lower,
           {randn64({3, 3}).t(), randn64({2, 3}).t()});

  auto chol = [](const Inputs& x) { return linalg::cholesky(spd(x[0])); };
  sink.add("linalg/cholesky/matrix", chol, {randn64({3, 3})});
  sink.add("linalg/cholesky/batch", chol, {randn64({2, 4, 4})});
  sink.add("linalg/cholesky/one", chol, {randn64({1, 1})});
  sink.add("linalg/cholesky/empty", chol, {randn64({0, 0})});

  auto chol_solve = [](const Inputs& x) {
    return linalg::cholesky_solve(x[0], linalg::cholesky(spd(x[1])));
  };
  sink.add("linalg/cholesky_solve/matrix", chol_solve, {randn64({3, 2}), randn64({3, 3})});
  sink.add("linalg/cholesky_solve/broadcast", chol_solve, {randn64({2, 3, 1}), randn64({3, 3})});

  auto inv = [](const Inputs& x) { return linalg::inv(shifted(x[0])); };
  sink.add("linalg/inv/matrix", inv, {randn64({3, 3})});
  sink.add("linalg/inv/batch", inv, {randn64({2, 2, 2})});
  sink.add("linalg/inv/noncontiguous", inv, {randn64({3, 3}).t()});

  auto det = [](const Inputs& x) { return linalg::det(shifted(x[0])); };
  sink.add("linalg/det/matrix", det, {randn64({3, 3})});
  sink.add("linalg/det/batch", det, {randn64({2, 3, 3})});
  sink.add("linalg/det/one", det, {randn64({1, 1})});
  sink.add("linalg/det/empty", det, {randn64({0, 0})});
  // A negative determinant (rows swapped): the rules must not assume det > 0.
  sink.add("linalg/det/negative", [](const Inputs& x) { return linalg::det(-shifted(x[0])); },
           {randn64({3, 3})});

  // Two equal rows: LU meets an exactly zero pivot, det is 0 and its rules take the SVD path
  // (Note [det at singular matrices]); det is a polynomial, so finite differences still hold.
  auto equal_rows = [] {
    Tensor r = randn64({2, 3}).detach();
    return cat({r, r.narrow(0, 0, 1)}, 0).requires_grad_(true);
  };
  // Finite differences of the gradient are not usable here: at the perturbed points A is
  // invertible with condition ~1e6, and det(A) A⁻ᵀ's 1e-10 relative error divided by the step
  // swamps the difference. The second derivative at singular matrices is checked against the
  // exact Hessian of 2x2 det in tests/ops/linalg_lapack_test.cpp instead.
  sink.add("linalg/det/singular", [](const Inputs& x) { return linalg::det(x[0]); }, {equal_rows()})
      .gradgrad = false;

  // det's gradient, adj(A)ᵀ (the det_cofactors op, whose kernel picks LU or SVD per matrix):
  // its derivatives are the composite's, checked here through the second and third
  // derivatives of det.
  auto cofactors = [](const Inputs& x) {
    return grad([](const Tensor& a) { return linalg::det(a).sum(); })(shifted(x[0]));
  };
  sink.add("linalg/det_cofactors/matrix", cofactors, {randn64({3, 3})});
  sink.add("linalg/det_cofactors/batch", cofactors, {randn64({2, 2, 2})});

  auto logabsdet = [](const Inputs& x) { return linalg::slogdet(shifted(x[0])).logabsdet; };
  sink.add("linalg/slogdet/matrix", logabsdet, {randn64({3, 3})});
  sink.add("linalg/slogdet/batch", logabsdet, {randn64({2, 3, 3})});
  sink.add("linalg/slogdet/negative",
           [](const Inputs& x) { return linalg::slogdet(-shifted(x[0])).logabsdet; },
           {randn64({3, 3})});

  // Eigenvectors and singular vectors are defined up to sign, so the samples look at them
  // through sign-invariant functions: V ∘ V, V f(w) Vᵀ, U Vh. LAPACK's sign choice is locally
  // constant, so Q and R are checked as they are.
  auto eig_values = [](const Inputs& x) { return linalg::eigh(symmetric(x[0])).eigenvalues; };
  auto eig_vectors = [](const Inputs& x) {
    Tensor v = linalg::eigh(symmetric(x[0])).eigenvectors;
    return v * v;
  };
  auto eig_function = [](const Inputs& x) {
    auto [w, v] = linalg::eigh(symmetric(x[0]));
    return matmul(v * w.exp().unsqueeze(-2), v.transpose(-2, -1));
  };
  sink.add("linalg/eigh/values", eig_values, {randn64({4, 4})});
  sink.add("linalg/eigh/vectors", eig_vectors, {randn64({3, 3})});
  sink.add("linalg/eigh/matrix_function", eig_function, {randn64({3, 3})});
  sink.add("linalg/eigh/batch", eig_vectors, {randn64({2, 3, 3})});
  sink.add("linalg/eigh/one", eig_function, {randn64({1, 1})});
  sink.add("linalg/eigh/empty", eig_vectors, {randn64({0, 3, 3})});
  auto eigvals = [](const Inputs& x) { return linalg::eigvalsh(symmetric(x[0])); };
  sink.add("linalg/eigvalsh/matrix", eigvals, {randn64({4, 4})});
  sink.add("linalg/eigvalsh/batch", eigvals, {randn64({2, 3, 3})});

  auto svd_all = [](const Inputs& x) {
    auto [u, s, vh] = linalg::svd(x[0]);
    return flat({s, u * u, vh * vh, matmul(u, vh)});
  };
  sink.add("linalg/svd/tall", svd_all, {randn64({4, 3})});
  sink.add("linalg/svd/wide", svd_all, {randn64({2, 4})});
  sink.add("linalg/svd/square", svd_all, {randn64({3, 3})});
  sink.add("linalg/svd/batch", svd_all, {randn64({2, 4, 2})});
  sink.add("linalg/svd/noncontiguous", svd_all, {randn64({4, 3}).t()});
  sink.add("linalg/svd/values", [](const Inputs& x) { return linalg::svd(x[0]).s; },
           {randn64({3, 4})});
  auto svdvals = [](const Inputs& x) { return linalg::svdvals(x[0]); };
  sink.add("linalg/svdvals/tall", svdvals, {randn64({4, 3})});
  sink.add("linalg/svdvals/batch_wide", svdvals, {randn64({2, 2, 3})});

  auto qr = [](const Inputs& x) {
    auto [q, r] = linalg::qr(x[0]);
    return flat({q, r});
  };
  sink.add("linalg/qr/tall", qr, {randn64({4, 3})});
  sink.add("linalg/qr/square", qr, {randn64({3, 3})});
  sink.add("linalg/qr/wide", qr, {randn64({2, 4})});
  sink.add("linalg/qr/batch", qr, {randn64({2, 4, 2})});
  sink.add("linalg/qr/noncontiguous", qr, {randn64({3, 4}).t()});

  auto lstsq = [](const Inputs& x) { return linalg::lstsq(x[0], x[1]); };
  sink.add("linalg/lstsq/overdetermined", lstsq, {randn64({5, 3}), randn64({5, 2})});
  sink.add("linalg/lstsq/underdetermined", lstsq, {randn64({2, 4}), randn64({2, 1})});
  sink.add("linalg/lstsq/vector", lstsq, {randn64({4, 2}), randn64({4})});
  sink.add("linalg/lstsq/broadcast", lstsq, {randn64({2, 4, 3}), randn64({4, 2})});
}

ADJOINT_REGISTER_SAMPLES(linalg_matrix_exp) {
  auto expm = [](const Inputs& x) { return linalg::matrix_exp(x[0]); };
  sink.add("linalg/matrix_exp/matrix", expm, {randn64({3, 3})});
  sink.add("linalg/matrix_exp/batch", expm, {randn64({2, 2, 2})});
  sink.add("linalg/matrix_exp/one", expm, {randn64({1, 1})});
  sink.add("linalg/matrix_exp/noncontiguous", expm, {randn64({3, 3}).t()});
  // A norm well above θ13, so the result is squared several times.
  sink.add("linalg/matrix_exp/squared",
           [](const Inputs& x) { return linalg::matrix_exp(x[0] * 4.0); }, {randn64({3, 3})});
  sink.add("linalg/matrix_exp/empty", expm, {randn64({0, 3, 3})});
}
