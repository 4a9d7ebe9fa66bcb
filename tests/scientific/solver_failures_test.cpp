// The solvers either return an answer within their tolerance or throw a named error: huge and
// tiny right-hand sides are solved (overflow-safe norms, scale-invariant tests), NaN and inf
// never read as converged, a diverging iteration is an error, and meaningless arguments
// (negative or NaN tolerances, bad counts, a step count beyond int64, a non-finite y0) are
// refused up front by name. Oracles: the analytic solutions of the scaled systems.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::error_message;
using adjoint::testing::expect_error;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const MatVec kTwice = [](const Tensor& u) { return u * 2.0; };

// max_i |x_i / want_i - 1|: the relative error, elementwise, of a solution of any scale.
double rel_err(const Tensor& x, const Tensor& want) {
  return abs(x.to(DType::Float64) / want.to(DType::Float64) - 1.0).max().item<double>();
}

Tensor spd(int64_t n) {  // B Bᵀ + n I
  Generator gen(11);
  Tensor b = randn({n, n}, DType::Float64, &gen);
  return matmul(b, b.t()) + eye(n, std::nullopt, DType::Float64) * double(n);
}
Tensor mv(const Tensor& m, const Tensor& u) { return matmul(m, u.unsqueeze(1)).squeeze(1); }

TEST(KrylovScale, HugeRightHandSidesAreSolved) {
  // 2u = b: u = b / 2. |b|² overflows float64 (1e400) and float32 (1e60).
  for (auto solve : {&cg, &gmres}) {
    const Tensor b = full({2}, 1e200, DType::Float64);
    const Tensor x = solve(kTwice, b, {}, {});
    EXPECT_LT(rel_err(x, full({2}, 5e199, DType::Float64)), 1e-10);
    const Tensor b32 = full({2}, 1e30, DType::Float32);
    const Tensor x32 = solve(kTwice, b32, {}, {});
    ASSERT_EQ(x32.dtype(), DType::Float32);
    EXPECT_LT(rel_err(x32, full({2}, 5e29, DType::Float64)), 1e-5);
  }
}

TEST(KrylovScale, HugeAndTinySystemsMatchTheWellScaledOne) {
  // A x = s b has x = s A⁻¹ b: the solution of the unit system, scaled (LAPACK as the oracle).
  const Tensor m = spd(6);
  Generator gen(12);
  const Tensor b = randn({6}, DType::Float64, &gen);
  const Tensor want = linalg::solve(m, b);
  const MatVec A = [&](const Tensor& u) { return mv(m, u); };
  KrylovOptions relative_only;
  relative_only.atol = 0.0;  // the tiny system's |b| is far below the default atol
  for (double s : {1e200, 1e-200}) {
    EXPECT_LT(rel_err(cg(A, b * s, relative_only), want * s), 1e-8) << "cg, scale " << s;
    EXPECT_LT(rel_err(gmres(A, b * s, relative_only), want * s), 1e-8) << "gmres, scale " << s;
  }
}

TEST(KrylovScale, EachExampleUnderVmapIsScaledByItself) {
  const Tensor bs = stack({full({2}, 1e200, DType::Float64), full({2}, 3.0, DType::Float64)}, 0);
  const Tensor want = stack({full({2}, 5e199, DType::Float64), full({2}, 1.5, DType::Float64)}, 0);
  EXPECT_LT(rel_err(vmap([](const Tensor& b) { return cg(kTwice, b); })(bs), want), 1e-10);
  EXPECT_LT(rel_err(vmap([](const Tensor& b) { return gmres(kTwice, b); })(bs), want), 1e-10);
}

TEST(KrylovScale, NonFiniteInputsAndResidualsAreErrors) {
  for (auto [solve, name] : {std::pair{&cg, "[cg]"}, std::pair{&gmres, "[gmres]"}}) {
    for (double bad : {kNaN, kInf, -kInf}) {
      const Tensor b = tensor({1.0, bad}, DType::Float64);
      expect_error([&] { solve(kTwice, b, {}, {}); }, ErrorKind::Value,
                   {name, "b has non-finite entries", "[2] (float64)"});
      const Tensor b32 = tensor({1.0, bad}, DType::Float32);
      expect_error([&] { solve(kTwice, b32, {}, {}); }, ErrorKind::Value,
                   {name, "non-finite", "[2] (float32)"});
    }
    // An operator that returns NaN: the residual is named, not taken as converged.
    const MatVec nan_op = [](const Tensor& u) { return u * kNaN; };
    expect_error([&] { solve(nan_op, ones({3}, DType::Float64), {}, {}); }, ErrorKind::Value,
                 {name, "not finite", "[3] (float64)"});
    expect_error(
        [&] {
          solve(kTwice, ones({2}, DType::Float64), {}, tensor({kNaN, 0.0}, DType::Float64));
        },
        ErrorKind::Value, {name, "x0 has non-finite entries"});
  }
}

TEST(KrylovArgs, BadTolerancesAndCountsAreRefusedByName) {
  const Tensor b = ones({3}, DType::Float64);
  int calls = 0;
  const MatVec counted = [&](const Tensor& u) {
    ++calls;
    return u * 2.0;
  };
  for (auto [solve, name] : {std::pair{&cg, "[cg]"}, std::pair{&gmres, "[gmres]"}}) {
    KrylovOptions o;
    o.rtol = -1.0;
    expect_error([&] { solve(counted, b, o, {}); }, ErrorKind::Value,
                 {name, "rtol must be finite and >= 0", "-1"});
    o = {};
    o.atol = kNaN;
    expect_error([&] { solve(counted, b, o, {}); }, ErrorKind::Value,
                 {name, "atol must be finite and >= 0", "nan"});
    o = {};
    o.rtol = kInf;
    expect_error([&] { solve(counted, b, o, {}); }, ErrorKind::Value, {name, "rtol", "inf"});
    o = {};
    o.max_iters = -3;
    expect_error([&] { solve(counted, b, o, {}); }, ErrorKind::Value,
                 {name, "max_iters must be >= 0", "-3"});
  }
  EXPECT_EQ(calls, 0);  // refused before any product
  LinearSolveOptions lo;
  lo.krylov.atol = -1e-3;
  expect_error(
      [&] {
        linear_solve([](const Tensor& u, const std::vector<Tensor>&) { return u; }, b, {}, lo);
      },
      ErrorKind::Value, {"[linear_solve]", "krylov.atol must be finite and >= 0", "-0.001"});
}

TEST(FixedPointFailures, ADivergingIterationIsAnError) {
  // x = 2x + 1 has the fixed point -1, but plain iteration from 1 runs away (x_k = 2^(k+1) - 1).
  const ImplicitFn f = [](const Tensor& x, const std::vector<Tensor>&) { return x * 2.0 + 1.0; };
  const Tensor x0 = tensor({1.0}, DType::Float64);
  expect_error(
      [&] { fixed_point(f, x0, {}); }, ErrorKind::Value,
      {"[fixed_point]", "did not converge in 1000 iterations", "diverging", "x0 [1] (float64)"});
  ImplicitOptions longer;
  longer.max_iters = 2000;  // 2^1024 overflows: the step becomes inf
  expect_error([&] { fixed_point(f, x0, {}, longer); }, ErrorKind::Value,
               {"[fixed_point]", "diverged", "not finite", "x0 [1] (float64)"});
  // With a parameter, so the differentiable path runs too: no gradient of a wrong point.
  const Tensor c = tensor({1.0}, TensorOptions(DType::Float64).requires_grad(true));
  expect_error(
      [&] {
        fixed_point([](const Tensor& x, const std::vector<Tensor>& p) { return x * 2.0 + p[0]; },
                    x0, {c});
      },
      ErrorKind::Value, {"[fixed_point]", "did not converge"});
}

TEST(FixedPointFailures, NonFiniteMapsAndStartsAreNamed) {
  // sqrt(x - 10) is NaN at every x < 10.
  const ImplicitFn nan_map = [](const Tensor& x, const std::vector<Tensor>&) {
    return sqrt(x - 10.0);
  };
  expect_error([&] { fixed_point(nan_map, zeros({2}, DType::Float64), {}); }, ErrorKind::Value,
               {"[fixed_point]", "not finite at x0", "nan"});
  const ImplicitFn halve = [](const Tensor& x, const std::vector<Tensor>&) { return x * 0.5; };
  expect_error([&] { fixed_point(halve, tensor({kInf}, DType::Float64), {}); }, ErrorKind::Value,
               {"[fixed_point]", "x0 has non-finite entries"});
  // A forward solver that returns NaN is caught by the check of its answer.
  ImplicitOptions o;
  o.solver = [](const MatVec&, const Tensor& x0) { return full_like(x0, kNaN); };
  expect_error([&] { fixed_point(halve, zeros({2}, DType::Float64), {}, o); }, ErrorKind::Value,
               {"[fixed_point]", "non-finite solution"});
}

TEST(RootScale, HugeResidualsAreSolved) {
  // (x - p) 1e300 = 0: x = p, dx/dp = 1. |g(x0)|² overflows.
  const ImplicitFn g = [](const Tensor& x, const std::vector<Tensor>& p) {
    return (x - p[0]) * 1e300;
  };
  const Tensor x = root(g, zeros({2}, DType::Float64), {full({2}, 1.0, DType::Float64)});
  EXPECT_LT(abs(x - 1.0).max().item<double>(), 1e-10);
  const Tensor p = tensor({1.0, -2.0}, TensorOptions(DType::Float64).requires_grad(true));
  const Tensor y = root(g, zeros({2}, DType::Float64), {p});
  EXPECT_LT(abs(y.detach() - p.detach()).max().item<double>(), 1e-10);
  y.sum().backward();
  EXPECT_LT(abs(p.grad() - 1.0).max().item<double>(), 1e-8);
}

TEST(RootFailures, NonFiniteResidualsAndBadArgumentsAreNamed) {
  const ImplicitFn g = [](const Tensor& x, const std::vector<Tensor>&) { return exp(x) - 2.0; };
  expect_error([&] { root(g, tensor({1000.0}, DType::Float64), {}); }, ErrorKind::Value,
               {"[root]", "|g(x)| is not finite at x0", "inf", "x0 [1] (float64)"});
  int calls = 0;
  const ImplicitFn counted = [&](const Tensor& x, const std::vector<Tensor>&) {
    ++calls;
    return x - 1.0;
  };
  const Tensor x0 = zeros({2}, DType::Float64);
  ImplicitOptions o;
  o.rtol = -1e-6;
  expect_error([&] { root(counted, x0, {}, o); }, ErrorKind::Value,
               {"[root]", "rtol must be finite and >= 0", "-1e-06"});
  expect_error([&] { fixed_point(counted, x0, {}, o); }, ErrorKind::Value,
               {"[fixed_point]", "rtol must be finite and >= 0"});
  o = {};
  o.atol = kNaN;
  expect_error([&] { fixed_point(counted, x0, {}, o); }, ErrorKind::Value,
               {"[fixed_point]", "atol must be finite and >= 0", "nan"});
  o = {};
  o.max_iters = -1;
  expect_error([&] { root(counted, x0, {}, o); }, ErrorKind::Value,
               {"[root]", "max_iters must be >= 0", "-1"});
  o = {};
  o.linear.krylov.restart = 0;  // Newton's inner GMRES
  expect_error([&] { root(counted, x0, {}, o); }, ErrorKind::Value,
               {"[root]", "linear.krylov.restart must be >= 1", "0"});
  EXPECT_EQ(calls, 0);  // refused before any evaluation
}

// y' = -y: y(1) = e^-1.
const VectorField kDecay = [](double, const Tensor& y, const std::vector<Tensor>&) { return -y; };

OdeOptions rk4(double h) {
  OdeOptions o;
  o.method = OdeMethod::RK4;
  o.step_size = h;
  return o;
}

TEST(OdeintArgs, Rk4StepCountIsRangeChecked) {
  const Tensor y0 = ones({1}, DType::Float64), t = tensor({0.0, 1.0}, DType::Float64);
  for (double h : {1e-30, 1e-13}) {  // 1e30 and 1e13 steps: past int64 and past 2^40
    expect_error([&] { odeint(kDecay, y0, t, {}, rk4(h)); }, ErrorKind::Value,
                 {"[odeint]", "RK4", "steps between t=0 and t=1", "2^40"});
  }
  for (double h : {kNaN, kInf, -0.1}) {
    expect_error([&] { odeint(kDecay, y0, t, {}, rk4(h)); }, ErrorKind::Value,
                 {"[odeint]", "RK4 needs a positive, finite step_size"});
  }
  // A fine but sane step count still runs: RK4's error at h = 1e-3 is ~1e-15.
  const Tensor ys = odeint(kDecay, y0, t, {}, rk4(1e-3));
  EXPECT_NEAR(ys.select(0, 1).item<double>(), std::exp(-1.0), 1e-12);
}

TEST(OdeintArgs, NonFiniteY0AndTolerancesAreNamed) {
  const Tensor t = tensor({0.0, 1.0}, DType::Float64);
  for (double bad : {kNaN, kInf}) {
    const Tensor y0 = tensor({1.0, bad}, DType::Float64);
    expect_error([&] { odeint(kDecay, y0, t, {}, {}); }, ErrorKind::Value,
                 {"[odeint]", "y0 has non-finite entries", "y0 [2] (float64)"});
    expect_error([&] { odeint(kDecay, y0, t, {}, rk4(0.1)); }, ErrorKind::Value,
                 {"[odeint]", "y0 has non-finite entries"});
  }
  const Tensor y0 = ones({2}, DType::Float64);
  OdeOptions o;
  o.rtol = kNaN;
  expect_error([&] { odeint(kDecay, y0, t, {}, o); }, ErrorKind::Value,
               {"[odeint]", "rtol must be finite and >= 0", "nan"});
  o = {};
  o.atol = -1e-9;
  expect_error([&] { odeint(kDecay, y0, t, {}, o); }, ErrorKind::Value,
               {"[odeint]", "atol must be finite and >= 0"});
  o = {};
  o.step_size = kNaN;  // Dopri5's first step
  expect_error([&] { odeint(kDecay, y0, t, {}, o); }, ErrorKind::Value,
               {"[odeint]", "Dopri5's step_size", "nan"});
}

TEST(OdeintFailures, Rk4BlowUpIsAnError) {
  // y' = y², y(0) = 1: y = 1 / (1 - t) blows up at t = 1; RK4 overflows past it.
  const VectorField square = [](double, const Tensor& y, const std::vector<Tensor>&) {
    return y * y;
  };
  const Tensor y0 = ones({1}, DType::Float64), t = tensor({0.0, 0.5, 3.0}, DType::Float64);
  expect_error([&] { odeint(square, y0, t, {}, rk4(0.01)); }, ErrorKind::Value,
               {"[odeint]", "RK4 solution became non-finite between t=0.5 and t=3"});
}

TEST(OdeintFailures, Dopri5NamesANonFiniteField) {
  // f is NaN from the start: the message says so, not that the step size underflowed.
  const VectorField nan_field = [](double, const Tensor& y, const std::vector<Tensor>&) {
    return y * kNaN;
  };
  const Tensor y0 = ones({2}, DType::Float64), t = tensor({0.0, 1.0}, DType::Float64);
  const std::string msg = error_message([&] { odeint(nan_field, y0, t); }, ErrorKind::Value);
  EXPECT_TRUE(adjoint::testing::contains(msg, "[odeint] the vector field is not finite at t=0"))
      << msg;
  EXPECT_TRUE(adjoint::testing::contains(msg, "y0 [2] (float64)")) << msg;
}

}  // namespace
