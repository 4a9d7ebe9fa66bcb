// The function transforms against analytic derivatives: gradients, the Rosenbrock Hessian,
// Hessian-vector products both ways, Jacobians of a vector function by rows and by columns,
// third derivatives by composition, data-dependent loops and recursion, closures, and the
// caller's .grad() left alone.
#include <gtest/gtest.h>

#include <cmath>

#include "support/expect.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_values;

Tensor f64(std::initializer_list<double> v) { return tensor(v, DType::Float64); }
Tensor f64(std::initializer_list<double> v, const Shape& s) { return tensor(v, s, DType::Float64); }

// Rosenbrock: sum_i 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2.
Tensor rosenbrock(const Tensor& x) {
  const int64_t n = x.shape()[0];
  Tensor head = x.slice(0, 0, n - 1), tail = x.slice(0, 1, n);
  Tensor a = tail - head * head;
  Tensor b = 1 - head;
  return (a * a * 100 + b * b).sum();
}

// Its Hessian by hand.
std::vector<double> rosenbrock_hessian(const std::vector<double>& x) {
  const std::size_t n = x.size();
  std::vector<double> h(n * n, 0.0);
  for (std::size_t i = 0; i + 1 < n; ++i) {
    h[i * n + i] += 1200 * x[i] * x[i] - 400 * x[i + 1] + 2;
    h[(i + 1) * n + (i + 1)] += 200;
    h[i * n + i + 1] += -400 * x[i];
    h[(i + 1) * n + i] += -400 * x[i];
  }
  return h;
}

TEST(Grad, PolynomialAndValue) {
  auto f = [](const Tensor& x) { return (x * x * x).sum(); };
  const Tensor x = f64({1.0, -2.0, 0.5});
  expect_values(grad(f)(x), {3.0, 12.0, 0.75});
  auto [value, g] = value_and_grad(f)(x);
  expect_values(value, {1.0 - 8.0 + 0.125});
  expect_values(g, {3.0, 12.0, 0.75});
  EXPECT_FALSE(g.requires_grad()) << "a top-level gradient should be a plain tensor";
  EXPECT_FALSE(value.requires_grad());
}

TEST(Grad, ArgnumsAndListFunctions) {
  auto f = [](const Tensor& x, const Tensor& y) { return (x * y * y).sum(); };
  const Tensor x = f64({2.0}), y = f64({3.0});
  expect_values(grad(f, 1)(x, y), {2 * 2.0 * 3.0});
  std::vector<Tensor> both = grad(f, {0, 1})(x, y);
  expect_values(both[0], {9.0});
  expect_values(both[1], {12.0});
  auto g = [](const std::vector<Tensor>& xs) { return (xs[0] * xs[1].exp()).sum(); };
  std::vector<Tensor> all = grad(g)(std::vector<Tensor>{x, y});  // a list function: every element
  expect_values(all[0], {std::exp(3.0)});
  expect_values(all[1], {2 * std::exp(3.0)});
  expect_values(grad(g, 0)(std::vector<Tensor>{x, y}), {std::exp(3.0)});
}

TEST(Grad, ThirdDerivativeOfSinIsMinusCos) {
  auto f = [](const Tensor& x) { return sin(x).sum(); };
  auto d1 = grad(f);
  auto d2 = grad([&](const Tensor& x) { return d1(x).sum(); });
  auto d3 = grad([&](const Tensor& x) { return d2(x).sum(); });
  const Tensor x = f64({0.3, 1.1, -2.0});
  expect_values(d1(x), {std::cos(0.3), std::cos(1.1), std::cos(-2.0)});
  expect_values(d2(x), {-std::sin(0.3), -std::sin(1.1), -std::sin(-2.0)});
  expect_values(d3(x), {-std::cos(0.3), -std::cos(1.1), -std::cos(-2.0)});
  // The same by forward over reverse over reverse: jvp of grad of grad.
  auto [y, t] = jvp([&](const Tensor& z) { return d2(z); }, x, f64({1, 1, 1}));
  expect_values(t, {-std::cos(0.3), -std::cos(1.1), -std::cos(-2.0)});
}

TEST(Hessian, RosenbrockMatchesAnalyticAndIsSymmetric) {
  const std::vector<double> xv = {-1.2, 1.0, 0.4, 2.0};
  const Tensor x = tensor(xv, std::nullopt, DType::Float64);
  const Tensor h = hessian(rosenbrock)(x);
  ASSERT_EQ(h.shape(), Shape({4, 4}));
  expect_values(h, rosenbrock_hessian(xv), 1e-9);
  expect_values(h, h.t().contiguous().to_vector<double>(), 0);
  // Reverse over reverse by composition gives the same matrix.
  expect_values(jacrev(grad(rosenbrock))(x), rosenbrock_hessian(xv), 1e-9);
  expect_values(jacfwd(jacrev(rosenbrock))(x), rosenbrock_hessian(xv), 1e-9);
}

TEST(Hessian, HvpEqualsHessianTimesVectorBothWays) {
  const std::vector<double> xv = {0.5, -0.3, 1.7, 0.9, -1.1};
  const std::vector<double> vv = {1.0, 2.0, -1.0, 0.5, 3.0};
  const Tensor x = tensor(xv, std::nullopt, DType::Float64);
  const Tensor v = tensor(vv, std::nullopt, DType::Float64);
  const std::vector<double> h = rosenbrock_hessian(xv);
  std::vector<double> hv(5, 0.0);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 5; ++j) hv[i] += h[i * 5 + j] * vv[j];
  expect_values(hvp(rosenbrock, x, v), hv, 1e-9);
  expect_values(hvp(rosenbrock, x, v, HvpMode::ReverseOverReverse), hv, 1e-9);
  // Reverse over forward: the gradient of <grad f, v> computed with jvp inside grad.
  auto directional = [&](const Tensor& z) { return jvp(rosenbrock, z, v).tangents; };
  expect_values(grad(directional)(x), hv, 1e-9);
}

TEST(Hessian, BlocksForSeveralArguments) {
  // f(a, b) = a² b³: the 2×2 Hessian blocks by hand.
  auto f = [](const Tensor& a, const Tensor& b) { return (a * a * b * b * b).sum(); };
  const Tensor a = f64({1.5}, {}), b = f64({-0.5}, {});
  auto h = hessian(f, {0, 1})(a, b);
  const double av = 1.5, bv = -0.5;
  expect_values(h[0][0], {2 * bv * bv * bv});
  expect_values(h[0][1], {6 * av * bv * bv});
  expect_values(h[1][0], {6 * av * bv * bv});
  expect_values(h[1][1], {6 * av * av * bv});
}

TEST(Jacobian, VectorFunctionByRowsAndColumns) {
  // f(x) = [x0 x1 sin x2, x0 + exp x1]: J = [[x1 sin x2, x0 sin x2, x0 x1 cos x2],
  //                                          [1, exp x1, 0]]
  auto f = [](const Tensor& x) {
    Tensor x0 = x.slice(0, 0, 1), x1 = x.slice(0, 1, 2), x2 = x.slice(0, 2, 3);
    return cat({x0 * x1 * sin(x2), x0 + exp(x1)}, 0);
  };
  const double a = 0.7, b = -1.3, c = 2.1;
  const Tensor x = f64({a, b, c});
  const std::vector<double> want = {
      b * std::sin(c), a * std::sin(c), a * b * std::cos(c), 1.0, std::exp(b), 0.0};
  Tensor jr = jacrev(f)(x), jf = jacfwd(f)(x);
  EXPECT_EQ(jr.shape(), Shape({2, 3}));
  EXPECT_EQ(jf.shape(), Shape({2, 3}));
  expect_values(jr, want);
  expect_values(jf, want);
}

TEST(Jacobian, ShapesFollowOutputThenInput) {
  auto f = [](const Tensor& x, const Tensor& y) {
    return std::vector<Tensor>{matmul(x, y), x.sum()};
  };
  Generator gen(3);
  const Tensor x = randn({2, 3}, DType::Float64, &gen), y = randn({3, 4}, DType::Float64, &gen);
  auto jr = jacrev(f, {0, 1})(x, y);
  auto jf = jacfwd(f, {0, 1})(x, y);
  EXPECT_EQ(jr[0][0].shape(), Shape({2, 4, 2, 3}));
  EXPECT_EQ(jr[0][1].shape(), Shape({2, 4, 3, 4}));
  EXPECT_EQ(jr[1][0].shape(), Shape({2, 3}));
  EXPECT_EQ(jr[1][1].shape(), Shape({3, 4}));
  for (int o = 0; o < 2; ++o)
    for (int a = 0; a < 2; ++a) expect_values(jf[o][a], jr[o][a].to_vector<double>(), 1e-12);
  expect_values(jr[1][1], std::vector<double>(12, 0.0));  // x.sum() ignores y
  // d(xy)_{ij} / dx_{kl} = [i == k] y_{lj}
  std::vector<double> yv = y.to_vector<double>(), j00 = jr[0][0].to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int jj = 0; jj < 4; ++jj)
      for (int k = 0; k < 2; ++k)
        for (int l = 0; l < 3; ++l)
          EXPECT_NEAR(j00[((i * 4 + jj) * 2 + k) * 3 + l], i == k ? yv[l * 4 + jj] : 0.0, 1e-12);
}

TEST(Vjp, PullbackCanBeCalledTwice) {
  auto f = [](const Tensor& x) { return x * x; };
  auto [y, pullback] = vjp(f, f64({1.0, 3.0}));
  expect_values(y, {1.0, 9.0});
  expect_values(pullback(f64({1.0, 1.0})), {2.0, 6.0});
  expect_values(pullback(f64({0.5, -1.0})), {1.0, -6.0});
}

TEST(Jvp, OutputsAndTangentsAndLinearize) {
  auto f = [](const Tensor& x) { return std::vector<Tensor>{exp(x), x.sum()}; };
  auto [outs, tans] = jvp(f, f64({0.0, 1.0}), f64({2.0, 3.0}));
  expect_values(outs[0], {1.0, std::exp(1.0)});
  expect_values(tans[0], {2.0, 3 * std::exp(1.0)});
  expect_values(tans[1], {5.0});
  auto lin = linearize([](const Tensor& x) { return sin(x); }, f64({0.5}));
  expect_values(lin.outputs, {std::sin(0.5)});
  expect_values(lin.jvp(f64({2.0})), {2 * std::cos(0.5)});
  expect_values(lin.jvp(f64({-1.0})), {-std::cos(0.5)});
}

TEST(Transforms, DataDependentLoop) {
  // Newton's iteration for sqrt(a) runs until converged: how many steps depends on a. The
  // derivative of the converged result is that of sqrt, 1 / (2 sqrt a).
  int steps = 0;
  auto newton_sqrt = [&](const Tensor& a) {
    Tensor y = a;
    steps = 0;
    while (true) {
      Tensor next = (y + a / y) * 0.5;
      const double change = std::abs((next - y).item<double>());
      y = next;
      ++steps;
      if (change < 1e-15 || steps > 100) break;
    }
    return y.sum();
  };
  expect_values(grad(newton_sqrt)(f64({4.0}, {})), {0.25}, 1e-12);
  const int steps_small = steps;
  expect_values(grad(newton_sqrt)(f64({1e6}, {})), {0.5 / 1000.0}, 1e-12);
  EXPECT_NE(steps, steps_small) << "the loop should run a data-dependent number of times";
}

Tensor power(const Tensor& x, int n) { return n == 0 ? ones_like(x) : x * power(x, n - 1); }

TEST(Transforms, RecursionAndBranches) {
  auto f = [](const Tensor& x) {
    // A branch on the data: x^5 for positive sums, else x^3.
    return x.sum().item<double>() > 0 ? power(x, 5).sum() : power(x, 3).sum();
  };
  expect_values(grad(f)(f64({2.0})), {5 * 16.0});
  expect_values(grad(f)(f64({-2.0})), {3 * 4.0});
  expect_values(grad(grad([&](const Tensor& x) { return f(x); }))(f64({2.0})), {20 * 8.0});
}

TEST(Transforms, ClosuresAreNotConfused) {
  // d/dx [x * d/dy (x y)] = d/dx x² = 2x: the inner grad must not count the closure's x.
  auto f = [](const Tensor& x) {
    auto inner = grad([&](const Tensor& y) { return (x * y).sum(); });
    return (x * inner(f64({5.0}))).sum();
  };
  expect_values(grad(f)(f64({3.0})), {6.0});
  // The same with the inner function called on x itself: d/dx [x * d/dy (x y)|_{y=x}] = 2x.
  auto g = [](const Tensor& x) {
    auto inner = grad([&](const Tensor& y) { return (x * y).sum(); });
    return (x * inner(x)).sum();
  };
  expect_values(grad(g)(f64({3.0})), {6.0});
}

TEST(Transforms, GradientOfClosedOverParametersFlowsToTheirGrad) {
  // A meta-learning pattern: the gradient w.r.t. x of f(x; w) = sum(w x²) is 2 w x, and
  // backward() through it reaches w: d/dw sum(2 w x) = 2 x.
  Tensor w = tensor({1.5, -2.0}, TensorOptions(DType::Float64).requires_grad(true));
  const Tensor x = f64({0.5, 3.0});
  Tensor gx = grad([&](const Tensor& z) { return (w * z * z).sum(); })(x);
  expect_values(gx, {2 * 1.5 * 0.5, 2 * -2.0 * 3.0});
  ASSERT_TRUE(gx.requires_grad());
  gx.sum().backward();
  expect_values(w.grad(), {1.0, 6.0});
}

TEST(Transforms, CallersGradIsUntouched) {
  Tensor x = tensor({1.0, 2.0}, TensorOptions(DType::Float64).requires_grad(true));
  Tensor w = tensor({3.0, 4.0}, TensorOptions(DType::Float64).requires_grad(true));
  x.set_grad(f64({10.0, 20.0}));
  auto f = [&](const Tensor& z) { return (w * z * z).sum(); };
  expect_values(grad(f)(x), {6.0, 16.0});
  expect_values(hessian(f)(x), {6.0, 0.0, 0.0, 8.0});
  expect_values(hvp(f, x, f64({1.0, 1.0})), {6.0, 8.0});
  expect_values(jacrev(f)(x), {6.0, 16.0});
  expect_values(x.grad(), {10.0, 20.0});
  EXPECT_FALSE(w.grad().defined());
}

TEST(Transforms, UnusedInputGivesZeros) {
  auto f = [](const Tensor& x, const Tensor& y) { return (x * 2).sum(); };
  expect_values(grad(f, 1)(f64({1.0}), f64({7.0, 8.0})), {0.0, 0.0});
  expect_values(hessian(f, {0, 1})(f64({1.0}), f64({7.0}))[1][1], {0.0});
  expect_values(jacrev(f, 1)(f64({1.0}), f64({7.0})), {0.0});
}

TEST(Transforms, Float32Works) {
  auto f = [](const Tensor& x) { return (x * x).sum(); };
  Tensor g = grad(f)(tensor({1.5f, 2.0f}));
  EXPECT_EQ(g.dtype(), DType::Float32);
  expect_values(g, {3.0, 4.0}, 1e-6);
}

}  // namespace

namespace {

using namespace adjoint;
using adjoint::testing::expect_values;

// Derivatives with respect to directions and cotangents, which live outside the traced
// primal graph: jacrev of hvp is the Hessian (both modes), the gradient of a pullback with
// respect to its cotangent is the Jacobian's transpose applied, and the gradient of
// <jvp of grad, u> with respect to the tangent is H u.
TEST(Transforms, DerivativesWithRespectToDirections) {
  auto f = [](const Tensor& x) { return (x * x * x).sum(); };  // H = diag(6x)
  const Tensor x = tensor({1.0, 2.0}, DType::Float64);
  const Tensor v0 = tensor({0.5, -1.0}, DType::Float64);
  expect_values(jacrev([&](const Tensor& v) { return hvp(f, x, v); })(v0), {6.0, 0.0, 0.0, 12.0});
  expect_values(
      jacrev([&](const Tensor& v) { return hvp(f, x, v, HvpMode::ReverseOverReverse); })(v0),
      {6.0, 0.0, 0.0, 12.0});
  const Tensor w = tensor({2.0, -3.0}, DType::Float64);
  auto lin = [](const Tensor& z) { return z * 3; };
  expect_values(grad([&](const Tensor& u) { return (vjp(lin, x).pullback(u) * w).sum(); })(v0),
                {6.0, -9.0});
  const Tensor u = tensor({1.0, 1.0}, DType::Float64);
  auto directional = [&](const Tensor& v) {
    return (jvp([&](const Tensor& z) { return grad(f)(z); }, x, v).tangents * u).sum();
  };
  expect_values(grad(directional)(v0), {6.0, 12.0});
}

// Second order by forward over forward through layer_norm, whose JVP must not treat its
// saved statistics as constants: jvp of jvp equals vᵀ H v from hvp.
TEST(Transforms, ForwardOverForwardThroughLayerNorm) {
  Generator gen(4);
  const Tensor x = randn({2, 5}, DType::Float64, &gen), v = randn({2, 5}, DType::Float64, &gen);
  const Tensor c = randn({2, 5}, DType::Float64, &gen);
  auto f = [&](const Tensor& z) { return (layer_norm(z, {5}) * c).sum(); };
  auto first = [&](const Tensor& z) { return jvp(f, z, v).tangents; };
  const double fwd_fwd = jvp(first, x, v).tangents.item<double>();
  const double hv = (hvp(f, x, v) * v).sum().item<double>();
  EXPECT_NEAR(fwd_fwd, hv, 1e-10);
}

}  // namespace
