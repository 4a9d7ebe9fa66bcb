// fixed_point and root: values and derivatives (grad, jvp, hvp both ways) against the unrolled
// solver differentiated step by step, and against the analytic implicit derivative for a
// scalar root; the graph does not grow with iterations; the errors.
#include <gtest/gtest.h>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {

constexpr int64_t kN = 6;

Tensor rnd(const Shape& s, uint64_t seed, double scale = 1.0) {
  Generator gen(seed);
  return randn(s, DType::Float64, &gen) * scale;
}

double max_diff(const Tensor& a, const Tensor& b) { return abs(a - b).max().item<double>(); }

// A contraction: |W| small, tanh 1-Lipschitz.
Tensor layer(const Tensor& x, const std::vector<Tensor>& p) {
  return tanh(matmul(p[0], x.unsqueeze(1)).squeeze(1) + p[1]);
}

const Tensor kW = rnd({kN, kN}, 1, 0.15);
const Tensor kU = rnd({kN}, 2);
const Tensor kC = rnd({kN}, 3);
const Tensor kX0 = zeros({kN}, DType::Float64);

// The loss of the fixed point, implicit or by 200 recorded iterations (0.5^200: converged).
Tensor fp_loss(const std::vector<Tensor>& p, bool unrolled) {
  Tensor x;
  if (unrolled) {
    x = kX0;
    for (int i = 0; i < 200; ++i) x = layer(x, p);
  } else {
    x = fixed_point(layer, kX0, p);
  }
  return (kC * x * x).sum() + x.sum();
}

TEST(FixedPoint, ValueIsAFixedPoint) {
  const Tensor x = fixed_point(layer, kX0, {kW, kU});
  EXPECT_LT(max_diff(layer(x, {kW, kU}), x), 1e-10);
}

TEST(FixedPoint, GradMatchesUnrolled) {
  auto mine = grad([](const std::vector<Tensor>& p) { return fp_loss(p, false); })(
      std::vector<Tensor>{kW, kU});
  auto want = grad([](const std::vector<Tensor>& p) { return fp_loss(p, true); })(
      std::vector<Tensor>{kW, kU});
  EXPECT_LT(max_diff(mine[0], want[0]), 1e-9);
  EXPECT_LT(max_diff(mine[1], want[1]), 1e-9);
}

TEST(FixedPoint, BackwardReachesLeavesThroughOneNode) {
  Tensor w = kW.clone().requires_grad_(true), u = kU.clone().requires_grad_(true);
  Tensor x = fixed_point(layer, kX0, {w, u});
  ASSERT_TRUE(x.grad_fn());
  EXPECT_EQ(x.grad_fn()->name(), "implicit_rootBackward");
  // Its edges lead straight to the leaves (x0 has none): no node per iteration.
  int leaves = 0;
  for (const Edge& e : x.grad_fn()->next_edges()) {
    if (!e.valid()) continue;
    EXPECT_EQ(e.node->name(), std::string("AccumulateGrad"));
    ++leaves;
  }
  EXPECT_EQ(leaves, 2);
  fp_loss({w, u}, false).backward();
  auto want = grad([](const std::vector<Tensor>& p) { return fp_loss(p, true); })(
      std::vector<Tensor>{kW, kU});
  EXPECT_LT(max_diff(w.grad(), want[0]), 1e-9);
  EXPECT_LT(max_diff(u.grad(), want[1]), 1e-9);
}

TEST(FixedPoint, JvpMatchesUnrolled) {
  const std::vector<Tensor> t{rnd({kN, kN}, 4), rnd({kN}, 5)};
  auto f = [](bool unrolled) {
    return [unrolled](const std::vector<Tensor>& p) {
      Tensor x = unrolled ? [&] {
        Tensor y = kX0;
        for (int i = 0; i < 200; ++i) y = layer(y, p);
        return y;
      }()
                          : fixed_point(layer, kX0, p);
      return x;
    };
  };
  const Tensor mine = jvp(f(false), {kW, kU}, t).tangents;
  const Tensor want = jvp(f(true), {kW, kU}, t).tangents;
  EXPECT_LT(max_diff(mine, want), 1e-9);
}

TEST(FixedPoint, HvpMatchesUnrolledBothWays) {
  const std::vector<Tensor> v{rnd({kN, kN}, 6), rnd({kN}, 7)};
  for (HvpMode mode : {HvpMode::ForwardOverReverse, HvpMode::ReverseOverReverse}) {
    auto mine = hvp([](const std::vector<Tensor>& p) { return fp_loss(p, false); },
                    std::vector<Tensor>{kW, kU}, v, mode);
    auto want = hvp([](const std::vector<Tensor>& p) { return fp_loss(p, true); },
                    std::vector<Tensor>{kW, kU}, v, mode);
    EXPECT_LT(max_diff(mine[0], want[0]), 1e-8);
    EXPECT_LT(max_diff(mine[1], want[1]), 1e-8);
  }
}

TEST(FixedPoint, AnySolverGivesTheSameDerivative) {
  int calls = 0;
  ImplicitOptions o;
  o.solver = [&](const MatVec& f, const Tensor& x0) {  // damped iteration
    ++calls;
    Tensor x = x0;
    for (int i = 0; i < 400; ++i) x = x * 0.5 + f(x) * 0.5;
    return x;
  };
  auto loss = [&](const Tensor& u) {
    Tensor x = fixed_point(layer, kX0, {kW, u}, o);
    return (kC * x * x).sum();
  };
  const Tensor mine = grad(loss)(kU);
  const Tensor want = grad([](const Tensor& u) {
    Tensor x = kX0;
    for (int i = 0; i < 200; ++i) x = layer(x, {kW, u});
    return (kC * x * x).sum();
  })(kU);
  EXPECT_EQ(calls, 1);
  EXPECT_LT(max_diff(mine, want), 1e-9);
}

TEST(FixedPoint, Float32MeetsItsOwnDefaultTolerance) {
  auto loss = [](const std::vector<Tensor>& p) {
    Tensor x = fixed_point(layer, zeros({kN}, p[0].dtype()), p);
    return (x * x).sum();
  };
  const std::vector<Tensor> p32{kW.to(DType::Float32), kU.to(DType::Float32)};
  const auto g32 = grad(loss)(p32);
  const auto g64 = grad(loss)(std::vector<Tensor>{kW, kU});
  ASSERT_EQ(g32[0].dtype(), DType::Float32);
  EXPECT_LT(max_diff(g32[0].to(DType::Float64), g64[0]), 1e-4);
  EXPECT_LT(max_diff(g32[1].to(DType::Float64), g64[1]), 1e-4);
}

// g(x; a, c) = x³ + a x - c elementwise, a > 0: one real root, dx/dc = 1 / (3x² + a),
// dx/da = -x / (3x² + a).
Tensor cubic(const Tensor& x, const std::vector<Tensor>& p) { return x * x * x + p[0] * x - p[1]; }

TEST(Root, GradMatchesAnalyticImplicitDerivative) {
  const Tensor a = rnd({kN}, 8).abs() + 0.5, c = rnd({kN}, 9) * 3.0;
  const Tensor x = root(cubic, zeros({kN}, DType::Float64), {a, c});
  EXPECT_LT(abs(cubic(x, {a, c})).max().item<double>(), 1e-9);
  auto g = grad(
      [](const Tensor& aa, const Tensor& cc) {
        return root(cubic, zeros({kN}, DType::Float64), {aa, cc}).sum();
      },
      {0, 1})(a, c);
  const Tensor d = x * x * 3.0 + a;
  EXPECT_LT(max_diff(g[0], -x / d), 1e-9);
  EXPECT_LT(max_diff(g[1], ones_like(x) / d), 1e-9);
}

// Newton unrolled with its steps recorded: its derivative converges to the implicit one.
Tensor newton_unrolled(const Tensor& a, const Tensor& c) {
  Tensor x = zeros({kN}, DType::Float64);
  for (int i = 0; i < 60; ++i) x = x - cubic(x, {a, c}) / (x * x * 3.0 + a);
  return x;
}

TEST(Root, JvpAndHvpMatchUnrolledNewton) {
  const Tensor a = rnd({kN}, 10).abs() + 0.5, c = rnd({kN}, 11), ta = rnd({kN}, 12),
               tc = rnd({kN}, 13);
  auto mine = [&](const std::vector<Tensor>& p) {
    return root(cubic, zeros({kN}, DType::Float64), p);
  };
  auto want = [](const std::vector<Tensor>& p) { return newton_unrolled(p[0], p[1]); };
  EXPECT_LT(max_diff(jvp(mine, {a, c}, {ta, tc}).tangents, jvp(want, {a, c}, {ta, tc}).tangents),
            1e-9);
  auto lm = [&](const std::vector<Tensor>& p) { return (mine(p) * mine(p) * mine(p)).sum(); };
  auto lw = [&](const std::vector<Tensor>& p) { return (want(p) * want(p) * want(p)).sum(); };
  for (HvpMode mode : {HvpMode::ForwardOverReverse, HvpMode::ReverseOverReverse}) {
    auto hm = hvp(lm, {a, c}, {ta, tc}, mode);
    auto hw = hvp(lw, {a, c}, {ta, tc}, mode);
    EXPECT_LT(max_diff(hm[0], hw[0]), 1e-8);
    EXPECT_LT(max_diff(hm[1], hw[1]), 1e-8);
  }
}

TEST(Implicit, Errors) {
  const Tensor x0 = zeros({3}, DType::Float64), p = ones({3}, DType::Float64);
  ImplicitOptions few;
  few.max_iters = 50;
  expect_error(
      [&] {
        fixed_point([](const Tensor& x, const std::vector<Tensor>& q) { return x * 2.0 + q[0]; },
                    x0, {p}, few);
      },
      ErrorKind::Value, {"[fixed_point]", "did not converge", "x0 [3] (float64)", "[3] (float64)"});
  expect_error(
      [&] {  // x² + 1 has no real root
        root([](const Tensor& x, const std::vector<Tensor>& q) { return x * x + q[0]; }, x0, {p},
             few);
      },
      ErrorKind::Value, {"[root]", "did not converge", "x0 [3] (float64)"});
  expect_error(
      [&] {
        fixed_point([](const Tensor& x, const std::vector<Tensor>&) { return x.sum(); }, x0, {p});
      },
      ErrorKind::Shape, {"[fixed_point]", "shaped like x [3] (float64)", "[] (float64)"});
  expect_error(
      [&] {
        root(cubic, x0, {p, arange(3)});
      },
      ErrorKind::DType, {"[root]", "param 1", "int64"});
  expect_error(
      [&] {
        root(cubic, arange(3), {p, p});
      },
      ErrorKind::DType, {"[root]", "x0", "int64"});
  ImplicitOptions bad_solver;
  bad_solver.solver = [](const MatVec&, const Tensor&) { return zeros({2}, DType::Float64); };
  expect_error(
      [&] {
        root(cubic, x0, {p, p}, bad_solver);
      },
      ErrorKind::Shape, {"[root]", "solver returned [2] (float64)", "[3] (float64)"});
}

}  // namespace
