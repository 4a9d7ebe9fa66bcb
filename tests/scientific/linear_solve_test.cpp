// cg, gmres and linear_solve against linalg::solve (LAPACK) as the oracle: solutions, the
// jvp/vjp matrix-free products, first and second derivatives of linear_solve against those
// of linalg::solve, and the errors (indefinite, non-convergence, bad shapes and dtypes).
#include <gtest/gtest.h>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {

constexpr int64_t kN = 8;

Tensor rnd(const Shape& s, uint64_t seed) {
  Generator gen(seed);
  return randn(s, DType::Float64, &gen);
}

Tensor spd() {  // B Bᵀ + n I: symmetric positive definite, well conditioned
  Tensor b = rnd({kN, kN}, 1);
  return matmul(b, b.t()) + eye(kN, std::nullopt, DType::Float64) * double(kN);
}
Tensor nonsym() { return rnd({kN, kN}, 2) + eye(kN, std::nullopt, DType::Float64) * 6.0; }

Tensor mv(const Tensor& m, const Tensor& u) { return matmul(m, u.unsqueeze(1)).squeeze(1); }

double max_diff(const Tensor& a, const Tensor& b) { return abs(a - b).max().item<double>(); }

TEST(Krylov, CgMatchesLapackSolve) {
  const Tensor m = spd(), b = rnd({kN}, 3);
  const Tensor x = cg([&](const Tensor& u) { return mv(m, u); }, b);
  EXPECT_LT(max_diff(x, linalg::solve(m, b)), 1e-9);
}

TEST(Krylov, GmresMatchesLapackSolveWithAndWithoutRestarts) {
  const Tensor m = nonsym(), b = rnd({kN}, 4);
  const Tensor want = linalg::solve(m, b);
  const MatVec A = [&](const Tensor& u) { return mv(m, u); };
  EXPECT_LT(max_diff(gmres(A, b), want), 1e-9);
  KrylovOptions o;
  o.restart = 3;  // forces several restarts
  EXPECT_LT(max_diff(gmres(A, b, o), want), 1e-9);
  EXPECT_LT(max_diff(gmres(A, b, o, rnd({kN}, 5)), want), 1e-9);  // from a first guess
}

TEST(Krylov, Float32DefaultsAreReachable) {
  const Tensor m = nonsym(), b = rnd({kN}, 21);
  const Tensor m32 = m.to(DType::Float32), b32 = b.to(DType::Float32);
  const Tensor x = gmres([&](const Tensor& u) { return mv(m32, u); }, b32);
  const Tensor y = cg([&](const Tensor& u) { return mv(m32, mv(m32.t(), u)); }, b32);
  ASSERT_EQ(x.dtype(), DType::Float32);
  EXPECT_LT(max_diff(x.to(DType::Float64), linalg::solve(m, b)), 1e-4);
  EXPECT_LT(max_diff(y.to(DType::Float64), linalg::solve(matmul(m, m.t()), b)), 1e-3);
}

TEST(Krylov, SolvesMatrixShapedUnknowns) {
  // The operator acts on [4, 2] tensors: X -> M X with M [4, 4].
  Tensor m = rnd({4, 4}, 6) + eye(4, std::nullopt, DType::Float64) * 5.0;
  const Tensor b = rnd({4, 2}, 7);
  const Tensor x = gmres([&](const Tensor& u) { return matmul(m, u); }, b);
  EXPECT_LT(max_diff(x, linalg::solve(m, b)), 1e-9);
}

TEST(Krylov, JvpAndVjpProductsSolveWithTheJacobian) {
  const Tensor w = rnd({kN, kN}, 8) * 0.3, x0 = rnd({kN}, 9), b = rnd({kN}, 10);
  auto f = [&](const Tensor& x) { return x + tanh(mv(w, x)); };
  const Tensor J = jacfwd(f)(x0);
  EXPECT_LT(max_diff(gmres(jvp_matvec(f, x0), b), linalg::solve(J, b)), 1e-9);
  EXPECT_LT(max_diff(gmres(vjp_matvec(f, x0), b), linalg::solve(J.t().contiguous(), b)), 1e-9);
}

// loss(M, b) = <w, M⁻¹ b> by linear_solve and by linalg::solve.
Tensor loss_by(bool lapack, KrylovMethod method, const Tensor& m, const Tensor& b) {
  const Tensor w = rnd({kN}, 11);
  Tensor x;
  if (lapack) {
    x = linalg::solve(m, b);
  } else {
    LinearSolveOptions o;
    o.method = method;
    x = linear_solve([](const Tensor& u, const std::vector<Tensor>& p) { return mv(p[0], u); }, b,
                     {m}, o);
  }
  return (w * x * x).sum();  // nonlinear in x, so second derivatives are not trivial
}

Tensor loss_by_options(const Tensor& m, const Tensor& b, const LinearSolveOptions& o) {
  const Tensor w = rnd({kN}, 11);
  const Tensor x = linear_solve(
      [](const Tensor& u, const std::vector<Tensor>& p) { return mv(p[0], u); }, b, {m}, o);
  return (w * x * x).sum();
}

TEST(LinearSolve, GradientsMatchLapackSolve) {
  for (KrylovMethod method : {KrylovMethod::GMRES, KrylovMethod::CG}) {
    const Tensor m = method == KrylovMethod::CG ? spd() : nonsym();
    const Tensor b = rnd({kN}, 12);
    auto mine =
        grad([&](const Tensor& mm, const Tensor& bb) { return loss_by(false, method, mm, bb); },
             {0, 1})(m, b);
    auto want =
        grad([&](const Tensor& mm, const Tensor& bb) { return loss_by(true, method, mm, bb); },
             {0, 1})(m, b);
    EXPECT_LT(max_diff(mine[0], want[0]), 1e-8);
    EXPECT_LT(max_diff(mine[1], want[1]), 1e-8);
  }
}

TEST(LinearSolve, JvpMatchesLapackSolve) {
  const Tensor m = nonsym(), b = rnd({kN}, 13), tm = rnd({kN, kN}, 14), tb = rnd({kN}, 15);
  auto f = [](bool lapack) {
    return [lapack](const std::vector<Tensor>& p) {
      return loss_by(lapack, KrylovMethod::GMRES, p[0], p[1]);
    };
  };
  const Tensor mine = jvp(f(false), {m, b}, {tm, tb}).tangents;
  const Tensor want = jvp(f(true), {m, b}, {tm, tb}).tangents;
  EXPECT_NEAR(mine.item<double>(), want.item<double>(), 1e-8);
}

TEST(LinearSolve, HvpAndDoubleBackwardMatchLapackSolve) {
  const Tensor m = nonsym(), b = rnd({kN}, 16), v = rnd({kN}, 17);
  for (HvpMode mode : {HvpMode::ForwardOverReverse, HvpMode::ReverseOverReverse}) {
    auto f = [&](bool lapack) {
      return [&, lapack](const Tensor& bb) { return loss_by(lapack, KrylovMethod::GMRES, m, bb); };
    };
    EXPECT_LT(max_diff(hvp(f(false), b, v, mode), hvp(f(true), b, v, mode)), 1e-8);
  }
  // Second derivative in the operator's parameter (the transposed solve differentiated).
  auto g = [&](bool lapack) {
    return [&, lapack](const Tensor& mm) { return loss_by(lapack, KrylovMethod::GMRES, mm, b); };
  };
  const Tensor vm = rnd({kN, kN}, 18);
  EXPECT_LT(max_diff(hvp(g(false), m, vm), hvp(g(true), m, vm)), 1e-7);
}

TEST(LinearSolve, GivenTransposeIsUsed) {
  const Tensor m = nonsym(), b = rnd({kN}, 19);
  int transposes = 0;
  LinearSolveOptions o;
  o.transpose = [&](const Tensor& u, const std::vector<Tensor>& p) {
    ++transposes;
    return mv(p[0].t(), u);
  };
  auto f = [&](const Tensor& bb) {
    return linear_solve([](const Tensor& u, const std::vector<Tensor>& p) { return mv(p[0], u); },
                        bb, {m}, o)
        .sum();
  };
  const Tensor g = grad(f)(b);
  EXPECT_GT(transposes, 0);
  EXPECT_LT(max_diff(g, linalg::solve(m.t().contiguous(), ones({kN}, DType::Float64))), 1e-9);
}

TEST(LinearSolve, BoundProductsServeTheIterationsAndTheOperatorTheDerivatives) {
  const Tensor m = nonsym(), b = rnd({kN}, 22);
  int bound = 0, bound_t = 0;
  LinearSolveOptions o;
  o.bind = [&](const std::vector<Tensor>& p) -> MatVec {
    ++bound;
    return [m = p[0]](const Tensor& u) { return mv(m, u); };
  };
  o.bind_transpose = [&](const std::vector<Tensor>& p) -> MatVec {
    ++bound_t;
    return [m = p[0]](const Tensor& u) { return mv(m.t(), u); };
  };
  auto loss = [&](const Tensor& mm) { return loss_by_options(mm, b, o); };
  const Tensor g = grad(loss)(m);
  EXPECT_EQ(bound, 1);    // the forward solve
  EXPECT_EQ(bound_t, 1);  // the backward's transposed solve
  const Tensor want =
      grad([&](const Tensor& mm) { return loss_by(true, KrylovMethod::GMRES, mm, b); })(m);
  EXPECT_LT(max_diff(g, want), 1e-8);
}

TEST(Krylov, Errors) {
  const Tensor b = rnd({kN}, 20);
  const Tensor indefinite = nonsym() - eye(kN, std::nullopt, DType::Float64) * 20.0;
  expect_error([&] { cg([&](const Tensor& u) { return mv(indefinite, u); }, b); }, ErrorKind::Value,
               {"[cg]", "not positive definite", "[8] (float64)"});
  KrylovOptions few;
  few.max_iters = 2;
  expect_error([&] { gmres([&](const Tensor& u) { return mv(nonsym(), u); }, b, few); },
               ErrorKind::Value,
               {"[gmres]", "did not converge", "2 matrix-vector", "[8] (float64)"});
  expect_error([&] { gmres([](const Tensor& u) { return u.sum(); }, b); }, ErrorKind::Shape,
               {"[gmres]", "[8] (float64)", "[] (float64)"});
  expect_error([&] { cg([](const Tensor& u) { return u; }, arange(4)); }, ErrorKind::DType,
               {"[cg]", "int64"});
  expect_error([&] { gmres([](const Tensor& u) { return u; }, b, {}, rnd({3}, 1)); },
               ErrorKind::Shape, {"[gmres]", "[3] (float64)", "[8] (float64)"});
  expect_error(
      [&] {
        linear_solve([](const Tensor& u, const std::vector<Tensor>&) { return u; }, b, {arange(3)});
      },
      ErrorKind::DType, {"[linear_solve]", "param 0", "int64"});
}

}  // namespace
