// Values and errors of adjoint::linalg's solvers and determinants, against independent
// oracles: residuals (A X = B, inv(A) A = I, L Lᵀ = A), hand formulas for 2x2 and 3x3
// determinants, and det = sign exp(logabsdet). Derivatives are gradchecked in
// tests/gradcheck/samples_linalg_lapack.cpp; the decompositions are in linalg_decomp_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::testing;

namespace {

Tensor rnd(const Shape& s, DType dtype = DType::Float64) {
  static Generator gen(7);
  return randn(s, dtype, &gen);
}
Tensor eye_n(int64_t n, DType dtype = DType::Float64) { return eye(n, std::nullopt, dtype); }
/// Random matrices + 4 I: comfortably invertible.
Tensor invertible(const Shape& s, DType dtype = DType::Float64) {
  return rnd(s, dtype) + eye_n(s.back(), dtype) * 4.0;
}
Tensor spd(const Shape& s, DType dtype = DType::Float64) {
  Tensor x = rnd(s, dtype);
  return matmul(x, x.transpose(-2, -1)) + eye_n(s.back(), dtype) * 3.0;
}
double max_abs(const Tensor& t) {
  return t.numel() == 0 ? 0.0 : t.abs().max().to(DType::Float64).item<double>();
}

}  // namespace

TEST(LinalgSolve, ResidualIsZeroInBothPrecisions) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    const double tol = dt == DType::Float64 ? 1e-12 : 1e-4;
    Tensor a = invertible({4, 4}, dt), b = rnd({4, 3}, dt);
    Tensor x = linalg::solve(a, b);
    EXPECT_EQ(x.dtype(), dt);
    EXPECT_EQ(x.shape(), (Shape{4, 3}));
    EXPECT_LT(max_abs(matmul(a, x) - b), tol);
  }
}

TEST(LinalgSolve, VectorAndBroadcastBatches) {
  Tensor a = invertible({2, 1, 3, 3}), b = rnd({4, 3, 2});
  Tensor x = linalg::solve(a, b);
  EXPECT_EQ(x.shape(), (Shape{2, 4, 3, 2}));
  EXPECT_LT(max_abs(matmul(a, x) - b), 1e-12);
  Tensor v = rnd({3});
  Tensor xv = linalg::solve(a.select(0, 0).select(0, 0), v);
  EXPECT_EQ(xv.shape(), (Shape{3}));
  EXPECT_LT(max_abs(matmul(a.select(0, 0).select(0, 0), xv) - v), 1e-12);
}

TEST(LinalgSolve, NonContiguousOperands) {
  Tensor a = invertible({3, 3}).t(), b = rnd({2, 3}).t();
  EXPECT_LT(max_abs(matmul(a, linalg::solve(a, b)) - b), 1e-12);
}

TEST(LinalgSolveTriangular, ReadsOnlyItsTriangle) {
  Tensor full = invertible({4, 4}), b = rnd({4, 2});
  Tensor lo = linalg::solve_triangular(full, b, /*upper=*/false);
  EXPECT_LT(max_abs(matmul(full.tril(), lo) - b), 1e-12);
  Tensor up = linalg::solve_triangular(full, b, /*upper=*/true);
  EXPECT_LT(max_abs(matmul(full.triu(), up) - b), 1e-12);
  Tensor unit = linalg::solve_triangular(full, b, false, /*unitriangular=*/true);
  EXPECT_LT(max_abs(matmul(full.tril(-1) + eye_n(4), unit) - b), 1e-12);
}

TEST(LinalgCholesky, FactorReconstructsAndIsLowerTriangular) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    const double tol = dt == DType::Float64 ? 1e-12 : 1e-4;
    Tensor a = spd({2, 4, 4}, dt);
    Tensor l = linalg::cholesky(a);
    EXPECT_LT(max_abs(matmul(l, l.transpose(-2, -1)) - a), tol);
    EXPECT_EQ(max_abs(l.triu(1)), 0.0);
    EXPECT_GT(l.select(-1, 0).select(-1, 0).min().to(DType::Float64).item<double>(), 0.0);
  }
}

TEST(LinalgCholeskySolve, SolvesTheFactoredSystem) {
  Tensor a = spd({3, 3}), b = rnd({2, 3, 2});
  Tensor x = linalg::cholesky_solve(b, linalg::cholesky(a));
  EXPECT_EQ(x.shape(), (Shape{2, 3, 2}));
  EXPECT_LT(max_abs(matmul(a, x) - b), 1e-12);
}

TEST(LinalgInv, TimesTheMatrixIsTheIdentity) {
  Tensor a = invertible({3, 4, 4});
  Tensor ai = linalg::inv(a);
  EXPECT_LT(max_abs(matmul(ai, a) - eye_n(4)), 1e-12);
  EXPECT_LT(max_abs(matmul(a, ai) - eye_n(4)), 1e-12);
}

TEST(LinalgDet, MatchesHandFormulas) {
  Tensor a2 = tensor({3.0, 1.5, -2.0, 4.0}, {2, 2}, DType::Float64);
  expect_values(linalg::det(a2), {3.0 * 4.0 - 1.5 * -2.0}, 1e-12);
  // Rule of Sarrus on random 3x3 matrices, batched.
  Tensor a = rnd({5, 3, 3});
  std::vector<double> v = a.to_vector<double>(), want;
  for (int b = 0; b < 5; ++b) {
    auto m = [&](int i, int j) { return v[b * 9 + i * 3 + j]; };
    want.push_back(m(0, 0) * m(1, 1) * m(2, 2) + m(0, 1) * m(1, 2) * m(2, 0) +
                   m(0, 2) * m(1, 0) * m(2, 1) - m(0, 2) * m(1, 1) * m(2, 0) -
                   m(0, 0) * m(1, 2) * m(2, 1) - m(0, 1) * m(1, 0) * m(2, 2));
  }
  expect_values(linalg::det(a), want, 1e-12);
}

TEST(LinalgDet, PermutationSingularAndEmpty) {
  Tensor swap = tensor({0.0, 1.0, 1.0, 0.0}, {2, 2}, DType::Float64);
  expect_values(linalg::det(swap), {-1.0});
  Tensor singular = tensor({1.0, 2.0, 2.0, 4.0}, {2, 2}, DType::Float64);
  expect_values(linalg::det(singular), {0.0});
  expect_values(linalg::det(zeros({0, 0}, DType::Float64)), {1.0});
  EXPECT_EQ(linalg::det(zeros({0, 3, 3}, DType::Float64)).shape(), (Shape{0}));
}

TEST(LinalgSlogdet, AgreesWithDet) {
  Tensor a = rnd({6, 4, 4});
  auto [sign, logabs] = linalg::slogdet(a);
  EXPECT_LT(max_abs(sign * logabs.exp() - linalg::det(a)), 1e-10);
  EXPECT_FALSE(sign.requires_grad());
  Tensor singular = tensor({1.0, 2.0, 2.0, 4.0}, {2, 2}, DType::Float64);
  auto [s0, l0] = linalg::slogdet(singular);
  expect_values(s0, {0.0});
  EXPECT_EQ(l0.item<double>(), -std::numeric_limits<double>::infinity());
  // A determinant far beyond float64's range still has a finite log.
  Tensor big = eye_n(400) * 1e3;
  auto [sb, lb] = linalg::slogdet(big);
  expect_values(sb, {1.0});
  EXPECT_NEAR(lb.item<double>(), 400 * std::log(1e3), 1e-9);
}

TEST(LinalgErrors, SingularMatrixNamesBatchAndPivot) {
  Tensor singular = tensor({1.0, 2.0, 2.0, 4.0}, {2, 2}, DType::Float64);
  expect_error(
      [&] {
        linalg::solve(singular, rnd({2, 1}));
      },
      ErrorKind::Value, {"[solve]", "singular", "U[1, 1]", "info = 2", "[2, 2] (float64)"});
  Tensor batch = stack({eye_n(2), singular});
  expect_error(
      [&] {
        linalg::solve(batch, rnd({2, 2, 1}));
      },
      ErrorKind::Value, {"[solve]", "batch [1] of [2]", "U[1, 1]"});
  expect_error([&] { linalg::inv(batch); }, ErrorKind::Value, {"singular", "batch [1] of [2]"});
  Tensor tri = tensor({1.0, 0.0, 5.0, 0.0}, {2, 2}, DType::Float64);
  expect_error(
      [&] {
        linalg::solve_triangular(tri, rnd({2, 1}), false);
      },
      ErrorKind::Value, {"[solve_triangular]", "singular", "diagonal element [1, 1]", "info = 2"});
}

TEST(LinalgErrors, NotPositiveDefiniteNamesTheMinor) {
  Tensor a = tensor({1.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 1.0}, {3, 3}, DType::Float64);
  expect_error([&] { linalg::cholesky(a); }, ErrorKind::Value,
               {"[cholesky]", "not positive definite", "leading minor of order 2", "info = 2"});
  expect_error(
      [&] {
        linalg::cholesky(stack({eye_n(3), eye_n(3), a}).reshape({3, 1, 3, 3}));
      },
      ErrorKind::Value, {"batch [2, 0] of [3, 1]", "order 2"});
}

TEST(LinalgErrors, ShapesAndDtypes) {
  Tensor a = rnd({3, 3});
  for (auto f : std::vector<std::function<void()>>{
           [] {
             linalg::solve(rnd({3, 2}), rnd({3, 1}));
           },
           [] {
             linalg::cholesky(rnd({2, 3}));
           },
           [] {
             linalg::inv(rnd({2, 3, 4}));
           },
           [] {
             linalg::slogdet(rnd({1, 2}));
           },
       })
    expect_error(f, ErrorKind::Shape, {"square"});
  expect_error([] { linalg::det(rnd({4})); }, ErrorKind::Shape, {"[det]", "matrix", "[4]"});
  expect_error(
      [&] {
        linalg::solve(a, rnd({4, 1}));
      },
      ErrorKind::Shape, {"[solve]", "3 columns", "4 rows"});
  expect_error(
      [&] {
        linalg::solve(rnd({2, 3, 3}), rnd({4, 3, 1}));
      },
      ErrorKind::Shape, {"[solve]", "batch dims", "[2, 3, 3] (float64)", "[4, 3, 1] (float64)"});
  expect_error(
      [&] {
        linalg::cholesky_solve(rnd({2, 3, 1}), rnd({3, 3, 3}));
      },
      ErrorKind::Shape, {"[cholesky_solve]", "batch dims"});
  Tensor ints = zeros({3, 3}, DType::Int64);
  expect_error([&] { linalg::det(ints); }, ErrorKind::DType,
               {"[det]", "float32 or float64", "int64"});
  expect_error([&] { linalg::solve(ints, rnd({3, 1})); }, ErrorKind::DType, {"[solve]", "int64"});
  expect_error(
      [&] {
        linalg::solve(a, rnd({3, 1}, DType::Float32));
      },
      ErrorKind::DType, {"[solve]", "one dtype", "float32"});
  expect_error([&] { linalg::solve(a, Tensor()); }, ErrorKind::Shape, {"[solve]", "undefined"});
  expect_error([&] { linalg::cholesky(Tensor()); }, ErrorKind::Value, {"[cholesky]", "undefined"});
}

TEST(LinalgGradients, SolveGradientMatchesClosedForm) {
  // d/dB sum(W ∘ A⁻¹B) = A⁻ᵀ W, d/dA = -A⁻ᵀ W Xᵀ: checked against inv computed independently.
  Tensor a = invertible({3, 3}).requires_grad_(true), b = rnd({3, 2}).requires_grad_(true);
  Tensor w = rnd({3, 2});
  Tensor x = linalg::solve(a, b);
  (x * w).sum().backward();
  Tensor ainv_t = linalg::inv(a.detach()).t();
  EXPECT_LT(max_abs(b.grad() - matmul(ainv_t, w)), 1e-12);
  EXPECT_LT(max_abs(a.grad() + matmul(matmul(ainv_t, w), x.detach().t())), 1e-12);
}

TEST(LinalgGradients, LogdetHessianMatchesClosedForm) {
  // f(A) = log|det A| has gradient A⁻ᵀ and Hessian-vector product -A⁻ᵀ Hᵀ A⁻ᵀ: second
  // derivatives through slogdet's rules (which use solve's), by both hvp modes.
  Tensor a = invertible({3, 3}), h = rnd({3, 3});
  auto f = [](const Tensor& x) { return linalg::slogdet(x).logabsdet; };
  Tensor ainv_t = linalg::inv(a).t();
  EXPECT_LT(max_abs(grad(f)(a) - ainv_t), 1e-12);
  Tensor want = -matmul(matmul(ainv_t, h.t()), ainv_t);
  EXPECT_LT(max_abs(hvp(f, a, h) - want), 1e-12);
  EXPECT_LT(max_abs(hvp(f, a, h, HvpMode::ReverseOverReverse) - want), 1e-12);
  // And the JVP of det: d det = det tr(A⁻¹ dA).
  auto [d, td] = jvp([](const Tensor& x) { return linalg::det(x); }, a, h);
  const double trace = (linalg::inv(a) * h.t()).sum().item<double>();
  EXPECT_NEAR(td.item<double>(), d.item<double>() * trace, 1e-10);
}

TEST(LinalgGradients, DetGradientAtSingularMatricesIsTheCofactorMatrix) {
  // det [[a, b], [c, d]] = ad - bc has gradient [[d, -c], [-b, a]], singular or not.
  Tensor a2 = tensor({1.0, 2.0, 2.0, 4.0}, {2, 2}, f64_grad());
  linalg::det(a2).backward();
  expect_values(a2.grad(), {4.0, -2.0, -2.0, 1.0}, 1e-12);
  // A 3x3 matrix with two equal rows (rank 2): the cofactors from 2x2 minors.
  Tensor a3 = tensor({1.0, 2.0, 0.5, -1.0, 3.0, 2.0, 1.0, 2.0, 0.5}, {3, 3}, f64_grad());
  EXPECT_EQ(linalg::det(a3).item<double>(), 0.0);
  linalg::det(a3).backward();
  std::vector<double> m = a3.detach().to_vector<double>(), want(9);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      const int r0 = (i + 1) % 3, r1 = (i + 2) % 3, c0 = (j + 1) % 3, c1 = (j + 2) % 3;
      want[i * 3 + j] = m[r0 * 3 + c0] * m[r1 * 3 + c1] - m[r0 * 3 + c1] * m[r1 * 3 + c0];
    }
  expect_values(a3.grad(), want, 1e-12);
  // Rank 1: every 2x2 minor vanishes, so the gradient is zero.
  Tensor a1 = tensor({1.0, 2.0, 3.0, 2.0, 4.0, 6.0, -1.0, -2.0, -3.0}, {3, 3}, f64_grad());
  linalg::det(a1).backward();
  EXPECT_LT(max_abs(a1.grad()), 1e-12);
  // The JVP at a singular matrix is tr(adj(A) dA) too.
  Tensor t = rnd({3, 3});
  auto [d, td] = jvp([](const Tensor& x) { return linalg::det(x); }, a3.detach(), t);
  EXPECT_NEAR(td.item<double>(), (a3.grad() * t).sum().item<double>(), 1e-12);
}

// Matrices with two equal rows, scaled: the LU of A and the LU of Aᵀ (which the VJP's inverse
// factors) need not both meet an exactly zero pivot. Where A's does not but Aᵀ's does, the
// gradient is still the cofactor matrix, never a singular-matrix error.
TEST(LinalgGradients, DetGradientWhereOnlyTheTransposesLuIsExactlySingular) {
  Generator gen(17);
  int disagreements = 0;
  for (int trial = 0; trial < 400; ++trial) {
    Tensor r = randn({2, 3}, DType::Float64, &gen);
    Tensor a = (cat({r, r.narrow(0, 0, 1)}, 0) * 1.01).detach();
    const bool only_transpose =
        linalg::det(a).item<double>() != 0 && linalg::det(a.t().contiguous()).item<double>() == 0;
    disagreements += only_transpose;
    Tensor x = a.clone().requires_grad_(true);
    linalg::det(x).backward();
    std::vector<double> m = a.to_vector<double>(), want(9);
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        const int r0 = (i + 1) % 3, r1 = (i + 2) % 3, c0 = (j + 1) % 3, c1 = (j + 2) % 3;
        want[i * 3 + j] = m[r0 * 3 + c0] * m[r1 * 3 + c1] - m[r0 * 3 + c1] * m[r1 * 3 + c0];
      }
    expect_values(x.grad(), want, 1e-9);
  }
  EXPECT_GT(disagreements, 0) << "no trial reached the case this test is about";
}

TEST(LinalgGradients, DetSecondDerivativeAtASingularMatrix) {
  // det [[a, b], [c, d]] = ad - bc has the constant Hessian H -> [[h_d, -h_c], [-h_b, h_a]]:
  // exact at the singular A below too, where the gradient comes from the SVD.
  Tensor a = tensor({1.0, 2.0, 2.0, 4.0}, {2, 2}, DType::Float64);
  Tensor h = tensor({0.3, -1.2, 0.7, 2.0}, {2, 2}, DType::Float64);
  auto f = [](const Tensor& x) { return linalg::det(x); };
  for (HvpMode mode : {HvpMode::ForwardOverReverse, HvpMode::ReverseOverReverse})
    expect_values(hvp(f, a, h, mode), {2.0, -0.7, 1.2, 0.3}, 1e-12);
}
