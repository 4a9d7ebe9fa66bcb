// Forward mode through custom Functions whose backward or jvp reads a saved *output*: forward
// over reverse (hvp, jvp of grad) and nested levels need the saved output's tangents, as for
// built-in ops (Note [Tangents of saved outputs]); and a function that records no node must
// not keep its output alive through the tangent's graph. Values are checked against the
// analytic derivatives of exp and tanh, and against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "adjoint/tensor_impl.h"
#include "support/expect.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_values;
using adjoint::testing::f64_grad;

Tensor f64(std::initializer_list<double> v) { return tensor(v, DType::Float64); }

// y = exp(x); every rule reads the saved output: dy = y dx.
struct ExpOut : Function<ExpOut> {
  static Tensor forward(FunctionCtx& ctx, const Tensor& x) {
    Tensor y = exp(x);
    ctx.save_for_backward({y});
    return y;
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    return {g[0] * ctx.get_saved()[0]};
  }
  static std::vector<Tensor> jvp(FunctionCtx& ctx, std::vector<Tensor> t) {
    return {t[0] * ctx.get_saved()[0]};
  }
  static std::string name() { return "ExpOut"; }
};

// y = tanh(x), saving the input and the output: dy = (1 - y²) dx.
struct TanhOut : Function<TanhOut> {
  static Tensor forward(FunctionCtx& ctx, const Tensor& x) {
    Tensor y = tanh(x);
    ctx.save_for_backward({x, y});
    return y;
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    const Tensor y = ctx.get_saved()[1];
    return {g[0] * (1 - y * y)};
  }
  static std::vector<Tensor> jvp(FunctionCtx& ctx, std::vector<Tensor> t) {
    const Tensor y = ctx.get_saved()[1];
    return {t[0] * (1 - y * y)};
  }
  static std::string name() { return "TanhOut"; }
};

const std::vector<double> kX = {0.3, -1.1, 0.8};
const std::vector<double> kV = {1.5, -0.5, 2.0};

// d/dx (d/dx sum tanh(x)) along v: -2 tanh(x) (1 - tanh²(x)) v.
std::vector<double> tanh_hvp() {
  std::vector<double> r;
  for (std::size_t i = 0; i < kX.size(); ++i) {
    const double y = std::tanh(kX[i]);
    r.push_back(-2 * y * (1 - y * y) * kV[i]);
  }
  return r;
}

TEST(CustomFunctionForwardOverReverse, HvpReadsTheSavedOutputsTangent) {
  const Tensor x = f64({kX[0], kX[1], kX[2]}), v = f64({kV[0], kV[1], kV[2]});
  auto f_exp = [](const Tensor& z) { return ExpOut::apply(z).sum(); };
  std::vector<double> want;
  for (std::size_t i = 0; i < kX.size(); ++i) want.push_back(std::exp(kX[i]) * kV[i]);
  expect_values(hvp(f_exp, x, v, HvpMode::ForwardOverReverse), want);
  expect_values(hvp(f_exp, x, v, HvpMode::ReverseOverReverse), want);

  auto f_tanh = [](const Tensor& z) { return TanhOut::apply(z).sum(); };
  expect_values(hvp(f_tanh, x, v, HvpMode::ForwardOverReverse), tanh_hvp());
  expect_values(hvp(f_tanh, x, v, HvpMode::ReverseOverReverse), tanh_hvp());
}

TEST(CustomFunctionForwardOverReverse, JvpOfGradMatchesFiniteDifferences) {
  const Tensor x = f64({kX[0], kX[1], kX[2]}), v = f64({kV[0], kV[1], kV[2]});
  auto f = [](const Tensor& z) { return (TanhOut::apply(z) * ExpOut::apply(z)).sum(); };
  const Tensor hv = jvp(grad(f), x, v).tangents;
  // Central differences of the gradient (computed through the custom backward) along v.
  const double h = 1e-5;
  const Tensor gp = grad(f)(x + v * h), gm = grad(f)(x - v * h);
  expect_values(hv, ((gp - gm) / (2 * h)).to_vector<double>(), 1e-7);
  // And analytically: f = sum tanh(x) exp(x), f'' = e^x (tanh + 2 sech² - 2 tanh sech²).
  std::vector<double> want;
  for (std::size_t i = 0; i < kX.size(); ++i) {
    const double t = std::tanh(kX[i]), s2 = 1 - t * t;
    want.push_back(std::exp(kX[i]) * (t + 2 * s2 - 2 * t * s2) * kV[i]);
  }
  expect_values(hv, want, 1e-12);
}

TEST(CustomFunctionForwardOverReverse, BackwardInsideTheLevelSeesTheOutputTangent) {
  // The same by hand: a dual input that requires grad, then autograd::grad inside the level.
  Tensor x = tensor({0.4, -0.7}, f64_grad());
  DualLevel level;
  Tensor d = make_dual(x, f64({2.0, 3.0}));
  Tensor y = ExpOut::apply(d);
  Tensor g = autograd::grad({y.sum()}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  expect_values(g, {std::exp(0.4), std::exp(-0.7)});
  // d/dx exp(x) along t, read from the tangent of the saved output.
  expect_values(g.tangent(), {std::exp(0.4) * 2.0, std::exp(-0.7) * 3.0});
}

TEST(CustomFunctionJvp, NestedLevelsSeeTheSavedOutputsOuterTangent) {
  // exp(x + e1 t1 + e2 t2): the inner tangent is exp(x) t2, its outer tangent exp(x) t1 t2.
  // x requires grad, so the function records a node and saves its output.
  Tensor x = tensor({0.2, 1.1}, f64_grad());
  const Tensor t1 = f64({1.5, -2.0}), t2 = f64({0.5, 3.0});
  DualLevel outer;
  Tensor x1 = make_dual(x, t1);
  Tensor inner_tangent;
  {
    DualLevel inner;
    Tensor y = ExpOut::apply(make_dual(x1, t2));
    inner_tangent = y.tangent();
    expect_values(inner_tangent, {std::exp(0.2) * 0.5, std::exp(1.1) * 3.0});
  }
  expect_values(inner_tangent.tangent(), {std::exp(0.2) * 1.5 * 0.5, std::exp(1.1) * -2.0 * 3.0});
}

TEST(CustomFunctionJvp, UnrecordedFunctionDoesNotKeepItsOutputAlive) {
  // The input needs no gradient (no node), the tangent does, so the jvp's product is recorded
  // and saves what get_saved() gave it: that must not be the output itself, whose tangent
  // would then hold the output (a reference cycle until the level closes).
  const Tensor x = f64({0.5, -0.25});
  Tensor t = tensor({1.0, 2.0}, f64_grad());
  DualLevel level;
  std::weak_ptr<TensorImpl> weak;
  {
    Tensor y = ExpOut::apply(make_dual(x, t));
    weak = y.impl_ptr();
    expect_values(y, {std::exp(0.5), std::exp(-0.25)});
    Tensor ty = y.tangent();
    expect_values(ty, {std::exp(0.5), 2 * std::exp(-0.25)});
    ASSERT_TRUE(ty.requires_grad());
    // Reverse over forward still reaches the tangent's leaf: d(sum ty)/dt = exp(x). The graph
    // is retained: freeing it would break a cycle and hide one.
    expect_values(autograd::grad({ty.sum()}, {t}, {}, /*retain_graph=*/true)[0],
                  {std::exp(0.5), std::exp(-0.25)});
  }
  EXPECT_TRUE(weak.expired()) << "the output outlived every handle (reference cycle)";
}

}  // namespace

// y = exp(x) whose jvp throws: the error must not leave the node, its context and the
// output in a reference cycle (they were held by the pending saves).
struct ExpThrowingJvp : Function<ExpThrowingJvp> {
  static Tensor forward(FunctionCtx& ctx, const Tensor& x) { return ExpOut::forward(ctx, x); }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    return ExpOut::backward(ctx, std::move(g));
  }
  static std::vector<Tensor> jvp(FunctionCtx&, std::vector<Tensor>) {
    throw Error(ErrorKind::Value, "ExpThrowingJvp", "jvp failed on purpose");
  }
  static std::string name() { return "ExpThrowingJvp"; }
};

TEST(CustomFunctionJvp, AThrowingJvpLeaksNothing) {
  const std::size_t before = memory_stats().current_bytes;
  for (int i = 0; i < 20; ++i) {
    Tensor x = randn({1000}, DType::Float64).requires_grad_(true);
    DualLevel level;
    Tensor d = make_dual(x, ones_like(x));
    EXPECT_THROW(ExpThrowingJvp::apply(d), Error);
  }
  EXPECT_EQ(memory_stats().current_bytes, before);
}
