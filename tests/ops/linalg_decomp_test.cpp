// Values, errors and singular-point behaviour of adjoint::linalg's decompositions (eigh, qr,
// svd, lstsq) against identities: reconstruction (V diag(w) Vᵀ = A, Q R = A, U diag(S) Vh = A),
// orthonormality, S² = eig(AᵀA), the normal equations. Derivatives are gradchecked in
// tests/gradcheck/samples_linalg_lapack.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::testing;

namespace {

Tensor rnd(const Shape& s, DType dtype = DType::Float64) {
  static Generator gen(11);
  return randn(s, dtype, &gen);
}
Tensor eye_n(int64_t n, DType dtype = DType::Float64) { return eye(n, std::nullopt, dtype); }
Tensor mT(const Tensor& x) { return x.transpose(-2, -1); }
double max_abs(const Tensor& t) {
  return t.numel() == 0 ? 0.0 : t.abs().max().to(DType::Float64).item<double>();
}
double tol_for(DType dt) { return dt == DType::Float64 ? 1e-11 : 1e-4; }

/// Whether t's last dim is ascending (descending when !up) everywhere.
bool sorted(const Tensor& t, bool up) {
  const int64_t n = t.size(-1);
  std::vector<double> v = t.to(DType::Float64).to_vector<double>();
  for (std::size_t i = 0; i + 1 < v.size(); ++i)
    if ((static_cast<int64_t>(i) + 1) % n != 0 && (up ? v[i] > v[i + 1] : v[i] < v[i + 1]))
      return false;
  return true;
}

}  // namespace

TEST(LinalgEigh, ReconstructsWithOrthonormalVectors) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    Tensor x = rnd({3, 4, 4}, dt), a = x + mT(x);
    auto [w, v] = linalg::eigh(a);
    EXPECT_EQ(w.shape(), (Shape{3, 4}));
    EXPECT_EQ(v.shape(), (Shape{3, 4, 4}));
    EXPECT_LT(max_abs(matmul(v * w.unsqueeze(-2), mT(v)) - a), tol_for(dt));
    EXPECT_LT(max_abs(matmul(mT(v), v) - eye_n(4, dt)), tol_for(dt));
    EXPECT_TRUE(sorted(w, true));
    EXPECT_LT(max_abs(linalg::eigvalsh(a) - w), tol_for(dt));
  }
  // [[2, 1], [1, 2]] has eigenvalues 1 and 3 with eigenvectors (1, ∓1)/√2.
  Tensor a = tensor({2.0, 1.0, 1.0, 2.0}, {2, 2}, DType::Float64);
  expect_values(linalg::eigh(a).eigenvalues, {1.0, 3.0}, 1e-14);
  Tensor v = linalg::eigh(a).eigenvectors.abs();
  expect_values(v, {M_SQRT1_2, M_SQRT1_2, M_SQRT1_2, M_SQRT1_2}, 1e-14);
}

TEST(LinalgEigh, ReadsOnlyTheLowerTriangle) {
  Tensor x = rnd({3, 3}), a = x + mT(x);
  Tensor garbage_upper = a.tril() + (rnd({3, 3}) * 10.0).triu(1);
  EXPECT_LT(max_abs(linalg::eigvalsh(garbage_upper) - linalg::eigvalsh(a)), 1e-12);
}

TEST(LinalgQr, ReconstructsWithOrthonormalQAndTriangularR) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    for (Shape s : {Shape{5, 3}, Shape{3, 3}, Shape{3, 5}, Shape{2, 4, 2}}) {
      Tensor a = rnd(s, dt);
      auto [q, r] = linalg::qr(a);
      const int64_t k = std::min(s[s.size() - 2], s.back());
      EXPECT_EQ(q.size(-1), k);
      EXPECT_EQ(r.size(-2), k);
      EXPECT_LT(max_abs(matmul(q, r) - a), tol_for(dt)) << s;
      EXPECT_LT(max_abs(matmul(mT(q), q) - eye_n(k, dt)), tol_for(dt)) << s;
      EXPECT_EQ(max_abs(r.tril(-1)), 0.0) << s;
    }
  }
}

TEST(LinalgSvd, ReconstructsWithOrthonormalFactors) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    for (Shape s : {Shape{5, 3}, Shape{3, 3}, Shape{3, 5}, Shape{2, 4, 2}}) {
      Tensor a = rnd(s, dt);
      auto [u, sv, vh] = linalg::svd(a);
      const int64_t k = std::min(s[s.size() - 2], s.back());
      EXPECT_LT(max_abs(matmul(u * sv.unsqueeze(-2), vh) - a), tol_for(dt)) << s;
      EXPECT_LT(max_abs(matmul(mT(u), u) - eye_n(k, dt)), tol_for(dt)) << s;
      EXPECT_LT(max_abs(matmul(vh, mT(vh)) - eye_n(k, dt)), tol_for(dt)) << s;
      EXPECT_TRUE(sorted(sv, false)) << s;
      EXPECT_GE(sv.min().to(DType::Float64).item<double>(), 0.0);
      EXPECT_LT(max_abs(linalg::svdvals(a) - sv), tol_for(dt)) << s;
    }
  }
}

TEST(LinalgSvd, SquaredValuesAreTheEigenvaluesOfTheGram) {
  Tensor a = rnd({6, 3});
  Tensor s = linalg::svdvals(a);
  // eigvalsh is ascending, svdvals descending.
  Tensor w = linalg::eigvalsh(matmul(mT(a), a));
  std::vector<double> sv = s.to_vector<double>(), wv = w.to_vector<double>();
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(sv[i] * sv[i], wv[2 - i], 1e-11);
}

TEST(LinalgLstsq, SatisfiesTheNormalEquations) {
  Tensor a = rnd({2, 6, 3}), b = rnd({6, 2});
  Tensor x = linalg::lstsq(a, b);
  EXPECT_EQ(x.shape(), (Shape{2, 3, 2}));
  EXPECT_LT(max_abs(matmul(mT(a), matmul(a, x) - b)), 1e-12);
  // Against the normal-equation solution computed another way.
  EXPECT_LT(max_abs(x - linalg::solve(matmul(mT(a), a), matmul(mT(a), b))), 1e-10);
}

TEST(LinalgLstsq, UnderdeterminedGivesTheMinimumNorm) {
  Tensor a = rnd({2, 5}), b = rnd({2});
  Tensor x = linalg::lstsq(a, b);
  EXPECT_LT(max_abs(matmul(a, x) - b), 1e-12);
  // The minimum-norm solution is Aᵀ (A Aᵀ)⁻¹ b.
  EXPECT_LT(max_abs(x - matmul(mT(a), linalg::solve(matmul(a, mT(a)), b))), 1e-12);
}

TEST(LinalgDecompErrors, ShapesDtypesAndRank) {
  expect_error([] { linalg::eigh(rnd({2, 3})); }, ErrorKind::Shape, {"[eigh]", "square", "[2, 3]"});
  expect_error([] { linalg::eigvalsh(rnd({3})); }, ErrorKind::Shape, {"[eigvalsh]", "matrix"});
  expect_error(
      [] {
        linalg::svd(zeros({2, 2}, DType::Int64));
      },
      ErrorKind::DType, {"[svd]", "int64"});
  expect_error([] { linalg::qr(zeros({2, 2}, DType::Bool)); }, ErrorKind::DType, {"[qr]", "bool"});
  expect_error(
      [] {
        linalg::lstsq(rnd({4, 2}), rnd({3, 1}));
      },
      ErrorKind::Shape, {"[lstsq]", "4 rows", "3 rows"});
  expect_error(
      [] {
        linalg::lstsq(rnd({2, 4, 2}), rnd({3, 4, 1}));
      },
      ErrorKind::Shape, {"[lstsq]", "batch dims"});
  // The second column is twice the first: R[1, 1] is rounding noise, and lstsq says so.
  Tensor deficient = tensor({1.0, 2.0, 2.0, 4.0, 3.0, 6.0}, {3, 2}, DType::Float64);
  expect_error(
      [&] {
        linalg::lstsq(deficient, rnd({3, 1}));
      },
      ErrorKind::Value, {"[lstsq]", "rank deficient", "R[1, 1]", "batch element 0"});
  expect_error(
      [&] {
        linalg::lstsq(mT(deficient), rnd({2, 1}));
      },
      ErrorKind::Value, {"[lstsq]", "rank deficient"});
}

TEST(LinalgSingularPoints, ValuesOnlyOpsStayFiniteAtRepeatedValues) {
  // At A = I every eigenvalue and singular value is repeated: d sum(w)/dA = I and
  // d sum(S)/dA = U Vh = I, both finite through eigvalsh and svdvals.
  Tensor a = eye_n(3).requires_grad_(true);
  linalg::eigvalsh(a).sum().backward();
  EXPECT_LT(max_abs(a.grad() - eye_n(3)), 1e-12);
  Tensor b = eye_n(3).requires_grad_(true);
  linalg::svdvals(b).sum().backward();
  EXPECT_LT(max_abs(b.grad() - eye_n(3)), 1e-12);
}

TEST(LinalgSingularPoints, VectorGradientsAtRepeatedValuesAreNotFinite) {
  // Documented behaviour (docs/linalg.md), as PyTorch's: the eigenvectors of I are not
  // differentiable, and their gradient comes out as inf or NaN, not an error.
  Tensor a = eye_n(3).requires_grad_(true);
  Tensor v = linalg::eigh(a).eigenvectors;
  (v * rnd({3, 3})).sum().backward();
  std::vector<double> g = a.grad().to_vector<double>();
  bool finite = true;
  for (double x : g) finite = finite && std::isfinite(x);
  EXPECT_FALSE(finite);
  // The same for the singular vectors of I.
  Tensor b = eye_n(3).requires_grad_(true);
  (linalg::svd(b).u * rnd({3, 3})).sum().backward();
  finite = true;
  for (double x : b.grad().to_vector<double>()) finite = finite && std::isfinite(x);
  EXPECT_FALSE(finite);
}

TEST(LinalgSingularPoints, ValuesThroughTheFullDecompositionsStayFinite) {
  // eigh and svd used for their values only: the unused vectors' zero cotangent skips the
  // 1 / gap terms (as an undefined gradient does in PyTorch), so A = I still gives I.
  Tensor a = eye_n(3).requires_grad_(true);
  linalg::eigh(a).eigenvalues.sum().backward();
  EXPECT_LT(max_abs(a.grad() - eye_n(3)), 1e-12);
  Tensor b = eye_n(3).requires_grad_(true);
  linalg::svd(b).s.sum().backward();
  EXPECT_LT(max_abs(b.grad() - eye_n(3)), 1e-12);
}

TEST(LinalgMatrixExp, MatchesClosedForms) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    const double tol = dt == DType::Float64 ? 1e-13 : 1e-5;
    // exp([[0, 1], [0, 0]]) = [[1, 1], [0, 1]] (nilpotent: the series stops).
    Tensor n = tensor({0.0, 1.0, 0.0, 0.0}, {2, 2}, dt);
    EXPECT_LT(max_abs(linalg::matrix_exp(n) - tensor({1.0, 1.0, 0.0, 1.0}, {2, 2}, dt)), tol);
    // exp(t [[0, -1], [1, 0]]) is the rotation by t, also for t large enough to need squaring.
    for (double t : {0.3, 2.0, 40.0}) {
      Tensor g = tensor({0.0, -t, t, 0.0}, {2, 2}, dt);
      Tensor want = tensor({std::cos(t), -std::sin(t), std::sin(t), std::cos(t)}, {2, 2}, dt);
      EXPECT_LT(max_abs(linalg::matrix_exp(g) - want), tol * (1 + t * t)) << t;
    }
  }
}

TEST(LinalgMatrixExp, AgreesWithEigh) {
  // For symmetric A, exp(A) = V diag(exp(w)) Vᵀ (an independent route through LAPACK syevd).
  for (double scale : {0.1, 1.0, 8.0}) {
    Tensor x = rnd({2, 4, 4}), a = (x + mT(x)) * scale;
    auto [w, v] = linalg::eigh(a);
    Tensor want = matmul(v * w.exp().unsqueeze(-2), mT(v));
    EXPECT_LT(max_abs(linalg::matrix_exp(a) - want) / max_abs(want), 1e-12) << scale;
  }
  // exp(A) exp(-A) = I for a general A.
  Tensor a = rnd({3, 3}) * 3.0;
  EXPECT_LT(max_abs(matmul(linalg::matrix_exp(a), linalg::matrix_exp(-a)) - eye_n(3)), 1e-10);
  expect_error(
      [] {
        linalg::matrix_exp(rnd({2, 3}));
      },
      ErrorKind::Shape, {"[matrix_exp]", "square"});
}

TEST(LinalgDecompErrors, NonFiniteInputs) {
  // The iterative solvers refuse NaN and inf (LAPACK's gesdd can loop forever on inf); the
  // direct ones (LU, Cholesky, QR) let them through into the result, as PyTorch's do.
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    Tensor x = rnd({2, 3, 3}), a = x + mT(x);
    // Batch element 1 gets `bad` at [2, 1], in the lower triangle that eigh reads.
    Tensor poison = tensor({0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, bad, 0.0}, {3, 3}, DType::Float64);
    Tensor poisoned = stack({a.select(0, 0), a.select(0, 1) + poison});
    for (auto f : std::vector<std::function<void()>>{
             [&] { linalg::eigh(poisoned); }, [&] { linalg::eigvalsh(poisoned); },
             [&] { linalg::svd(poisoned); }, [&] { linalg::svdvals(poisoned); }})
      expect_error(f, ErrorKind::Value, {"non-finite", "batch [1] of [2]", "not defined"});
    Tensor x_nan = linalg::lstsq(poisoned, rnd({2, 3, 1}));
    EXPECT_FALSE(std::isfinite(x_nan.select(0, 1).sum().item<double>()));
    EXPECT_TRUE(std::isfinite(x_nan.select(0, 0).sum().item<double>()));
  }
}

TEST(LinalgGradients, Float32GradientsAgreeWithFloat64) {
  // One loss through every primitive, in both precisions: the float32 gradient is float32 and
  // close to the float64 one.
  auto loss = [](const Tensor& x) {
    Tensor sym = x + mT(x), spd = matmul(x, mT(x)) + eye_n(3, x.dtype()) * 3.0;
    Tensor a = x + eye_n(3, x.dtype()) * 4.0;
    return linalg::solve(a, x).sum() + linalg::cholesky(spd).sum() + linalg::slogdet(a).logabsdet +
           linalg::det(a) * 0.01 + linalg::eigh(sym).eigenvalues.square().sum() +
           linalg::svd(x).s.sum() + linalg::qr(x).r.sum() + linalg::matrix_exp(x * 0.5).sum();
  };
  Tensor x64 = rnd({3, 3});
  Tensor g64 = grad(loss)(x64), g32 = grad(loss)(x64.to(DType::Float32));
  EXPECT_EQ(g32.dtype(), DType::Float32);
  EXPECT_LT(max_abs(g32.to(DType::Float64) - g64) / max_abs(g64), 1e-4);
}
