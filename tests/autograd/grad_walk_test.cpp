// grad() walks only the history between its outputs and its inputs (Note [Pruning grad's
// walk] in src/autograd/engine.cpp): a gradient with respect to the end of a long chain does
// not visit the chain. The values are checked against analytic gradients, the walk's length
// against the nodes the graph has.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "adjoint/adjoint.h"
#include "autograd/graph_task.h"
#include "support/expect.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_same;

constexpr int kChain = 1000;

/// Elementwise |got - want| <= rtol * |want| + atol.
bool allclose(const Tensor& got, const Tensor& want, double rtol, double atol) {
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  if (g.size() != w.size()) return false;
  for (std::size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(g[i] - w[i]) <= rtol * std::abs(w[i]) + atol)) return false;
  return true;
}

/// x * 1.001 applied kChain times: a history of kChain nodes behind the result.
Tensor long_chain(const Tensor& x) {
  Tensor w = x;
  for (int i = 0; i < kChain; ++i) w = w * 1.001;
  return w;
}

TEST(GradWalk, AGradientAtTheEndOfALongChainDoesNotWalkTheChain) {
  const Tensor x = randn({4}, DType::Float64).requires_grad_(true);
  const Tensor w = long_chain(x);
  const Tensor y = (w * w).sum();
  const Tensor gw = autograd::grad({y}, {w}, {}, true)[0];
  expect_same(gw, w.detach() * 2.0);
  EXPECT_LT(autograd::last_walk_nodes(), 10u);  // sum, mul: not the chain
  // With respect to the chain's leaf the whole chain is walked, and the gradient is right.
  const Tensor gx = autograd::grad({y}, {x}, {}, true)[0];
  EXPECT_GT(autograd::last_walk_nodes(), static_cast<uint64_t>(kChain));
  double scale = 1;
  for (int i = 0; i < kChain; ++i) scale *= 1.001;
  const Tensor want = w.detach() * 2.0 * scale;
  EXPECT_TRUE(allclose(gx, want, 1e-12, 0));
  // backward() accumulates into every leaf: it walks everything.
  y.backward();
  EXPECT_GT(autograd::last_walk_nodes(), static_cast<uint64_t>(kChain));
  EXPECT_TRUE(allclose(x.grad(), want, 1e-12, 0));
}

TEST(GradWalk, InputsAtDifferentDepthsAndAPrunedBranchKeepTheirGradients) {
  const Tensor x = randn({3}, DType::Float64).requires_grad_(true);
  const Tensor u = long_chain(x);    // deep
  const Tensor v = u.sin() * 2.0;    // shallower, on top of u
  const Tensor old = long_chain(x);  // a branch no input lies on
  const Tensor y = (v * u).sum() + (old * u).sum();
  const std::vector<Tensor> g = autograd::grad({y}, {v, u}, {}, true);
  expect_same(g[0], u.detach());  // d/dv
  // d/du, through both products and through v = 2 sin(u): v + old + u * 2 cos(u)
  const Tensor want_u = v.detach() + old.detach() + u.detach() * 2.0 * u.detach().cos();
  EXPECT_TRUE(allclose(g[1], want_u, 1e-12, 1e-14));
  EXPECT_LT(autograd::last_walk_nodes(), 20u);
}

// A descent whose every step takes an inner gradient at the current iterate, through the
// transforms: each inner grad() walks the inner function, not the steps before it.
TEST(GradWalk, NestedGradientsInALoopWalkOnlyTheInnerFunction) {
  auto inner = [](const Tensor& p) { return (p * p * p).sum(); };
  Tensor p = full({2}, 0.5, DType::Float64).requires_grad_(true);
  const Tensor start = p;
  Tensor it = p;
  for (int step = 0; step < 200; ++step) {
    const Tensor g = autograd::grad({inner(it)}, {it}, {}, true, true)[0];
    EXPECT_LT(autograd::last_walk_nodes(), 12u) << "step " << step;
    it = it - g * 0.01;
  }
  // The outer gradient of the final iterate goes back through all 200 steps: against central
  // finite differences of the same loop.
  const Tensor outer = autograd::grad({it.sum()}, {start})[0];
  auto run = [&](double x0) {
    double x = x0;
    for (int step = 0; step < 200; ++step) x -= 3 * x * x * 0.01;
    return x;
  };
  const double h = 1e-6, fd = (run(0.5 + h) - run(0.5 - h)) / (2 * h);
  const std::vector<double> got = outer.to_vector<double>();
  for (double v : got) EXPECT_NEAR(v, fd, 1e-7);
}

}  // namespace
