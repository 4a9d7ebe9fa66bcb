// Forward mode itself: nested dual levels (second and third derivatives by tangents of
// tangents), levels closing, the forward and reverse switches being separate, and custom
// functions under nesting. Values are checked against derivatives of sin and exp by hand.
#include <gtest/gtest.h>

#include <cmath>

#include "adjoint/tensor_impl.h"
#include "support/expect.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_error;
using adjoint::testing::expect_values;

Tensor f64(std::initializer_list<double> v) { return tensor(v, DType::Float64); }

TEST(NestedDualLevels, TangentOfTangentIsSecondDerivative) {
  // sin(x + e1 t1 + e2 t2): the e2-tangent is cos(x) t2, whose e1-tangent is -sin(x) t1 t2.
  const Tensor x = f64({0.3, -1.2}), t1 = f64({1.5, 2.0}), t2 = f64({-0.5, 4.0});
  Tensor inner_tangent;
  {
    DualLevel outer;
    Tensor x1 = make_dual(x, t1);
    {
      DualLevel inner;
      Tensor y = sin(make_dual(x1, t2));
      auto [primal, tangent] = unpack_dual(y);
      inner_tangent = tangent;
      expect_values(tangent, {std::cos(0.3) * -0.5, std::cos(-1.2) * 4.0});
      // The primal is still dual at the outer level: its tangent there is cos(x) t1.
      EXPECT_FALSE(primal.tangent().defined());  // the inner level is the innermost here
    }
    // Back at the outer level: the inner tangent carries its own outer tangent.
    expect_values(inner_tangent.tangent(),
                  {-std::sin(0.3) * 1.5 * -0.5, -std::sin(-1.2) * 2.0 * 4.0});
  }
}

TEST(NestedDualLevels, UnpackedPrimalKeepsOuterTangent) {
  const Tensor x = f64({0.7}), t1 = f64({2.0}), t2 = f64({3.0});
  Tensor primal;
  {
    DualLevel outer;
    Tensor x1 = make_dual(x, t1);
    {
      DualLevel inner;
      Tensor y = exp(make_dual(x1, t2));
      primal = unpack_dual(y).first;
    }
    expect_values(primal.tangent(), {std::exp(0.7) * 2.0});
  }
}

TEST(NestedDualLevels, ThirdDerivativeByThreeLevels) {
  // d³/dx³ exp(2x) = 8 exp(2x), as the e1 e2 e3 coefficient with unit tangents.
  const Tensor x = f64({0.1}), one = f64({1.0});
  DualLevel l1;
  Tensor x1 = make_dual(x, one);
  Tensor d1;
  {
    DualLevel l2;
    Tensor x2 = make_dual(x1, one);
    Tensor d2;
    {
      DualLevel l3;
      d2 = unpack_dual(exp(make_dual(x2, one) * 2)).second;  // 2 exp(2x), dual at l1 and l2
    }
    d1 = unpack_dual(d2).second;  // 4 exp(2x), dual at l1
  }
  expect_values(d1.tangent(), {8 * std::exp(0.2)}, 1e-12);
}

TEST(NestedDualLevels, ClosedLevelDropsTangents) {
  Tensor y;
  {
    DualLevel level;
    y = sin(make_dual(f64({1.0}), f64({1.0})));
    EXPECT_TRUE(y.tangent().defined());
  }
  EXPECT_FALSE(y.tangent().defined());
  DualLevel again;
  EXPECT_FALSE(y.tangent().defined()) << "a tangent of a closed level reappeared";
}

TEST(ForwardGradModes, NoGradLeavesForwardModeOn) {
  DualLevel level;
  NoGradGuard no_grad;
  Tensor y = exp(make_dual(f64({0.5}), f64({3.0})));
  expect_values(y.tangent(), {3 * std::exp(0.5)});
}

TEST(ForwardGradModes, NoForwardGradLeavesReverseModeOn) {
  Tensor x = tensor({0.5}, TensorOptions(DType::Float64).requires_grad(true));
  DualLevel level;
  Tensor dual = make_dual(x, f64({3.0}));
  Tensor y;
  {
    NoForwardGradGuard off;
    EXPECT_FALSE(is_forward_grad_enabled());
    y = exp(dual);
  }
  EXPECT_TRUE(is_forward_grad_enabled());
  EXPECT_FALSE(y.tangent().defined());
  y.sum().backward();
  expect_values(x.grad(), {std::exp(0.5)});
}

TEST(ForwardGradModes, LevelOpenedWhileForwardGradIsOffWorksOnItsOwn) {
  DualLevel outer;
  Tensor x = make_dual(f64({0.5}), f64({3.0}));
  NoForwardGradGuard off;
  DualLevel inner;  // visible, while the outer level stays hidden
  Tensor y = exp(make_dual(x, f64({2.0})));
  expect_values(y.tangent(), {2 * std::exp(0.5)});
  EXPECT_EQ(y.impl()->autograd->tangents.size(), 1u)
      << "the hidden outer level must not have propagated";
}

// A custom function whose forward uses a transform (which opens a dual level of its own).
struct ExpViaJvp : Function<ExpViaJvp> {
  static Tensor forward(FunctionCtx& ctx, const Tensor& x) {
    Tensor e = jvp([](const Tensor& z) { return exp(z); }, x, ones_like(x)).tangents;
    ctx.save_for_backward({e});
    return e;
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    return {g[0] * ctx.get_saved()[0]};
  }
  static std::string name() { return "ExpViaJvp"; }
};

TEST(ForwardGradModes, TransformInsideCustomFunctionForward) {
  Tensor x = tensor({0.25}, TensorOptions(DType::Float64).requires_grad(true));
  Tensor y = ExpViaJvp::apply(x);
  expect_values(y, {std::exp(0.25)});
  y.sum().backward();
  expect_values(x.grad(), {std::exp(0.25)});
}

struct Square : Function<Square> {
  static Tensor forward(FunctionCtx& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    return x * x;
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    return {g[0] * 2 * ctx.get_saved()[0]};
  }
  static std::vector<Tensor> jvp(FunctionCtx& ctx, std::vector<Tensor> t) {
    return {t[0] * 2 * ctx.get_saved()[0]};
  }
  static std::string name() { return "Square"; }
};

struct SquareNoJvp : Function<SquareNoJvp> {
  static Tensor forward(FunctionCtx&, const Tensor& x) { return x * x; }
  static std::vector<Tensor> backward(FunctionCtx&, std::vector<Tensor> g) { return g; }
  static std::string name() { return "SquareNoJvp"; }
};

TEST(NestedDualLevels, CustomFunctionJvpNests) {
  // x² with tangents t1 (outer) and t2 (inner): inner tangent 2 x t2, its outer tangent 2 t1 t2.
  DualLevel outer;
  Tensor x = make_dual(f64({1.5}), f64({2.0}));
  Tensor inner_tangent;
  {
    DualLevel inner;
    inner_tangent = unpack_dual(Square::apply(make_dual(x, f64({5.0})))).second;
    expect_values(inner_tangent, {2 * 1.5 * 5.0});
  }
  expect_values(inner_tangent.tangent(), {2 * 2.0 * 5.0});
}

TEST(NestedDualLevels, CustomFunctionWithoutJvpIsNamed) {
  expect_error(
      [] {
        DualLevel level;
        SquareNoJvp::apply(make_dual(f64({1.0}), f64({1.0})));
      },
      ErrorKind::NotImplemented, {"SquareNoJvp", "jvp"});
}

}  // namespace

namespace {

using namespace adjoint;

// exp saves its output; with w requiring grad the output's tangent is recorded and reaches
// the node again (Note [Tangents of saved outputs]). Closing the level must break that cycle
// even though no backward ever runs: the node dies with the last tensor that uses it.
TEST(NestedDualLevels, ClosingALevelFreesRecordedTangentsOfSavedOutputs) {
  Tensor w = tensor({0.5, 1.5}, TensorOptions(DType::Float64).requires_grad(true));
  const Tensor x = tensor({1.0, 2.0}, DType::Float64), v = tensor({1.0, 1.0}, DType::Float64);
  std::weak_ptr<Node> node;
  {
    auto f = [&](const Tensor& z) {
      Tensor y = exp(z * w);
      node = y.grad_fn();
      return y;
    };
    auto r = jvp(f, x, v);
    EXPECT_FALSE(node.expired());
    EXPECT_TRUE(r.tangents.requires_grad()) << "the tangent should be recorded here";
  }
  EXPECT_TRUE(node.expired()) << "a reference cycle kept the exp node alive";
}

}  // namespace
