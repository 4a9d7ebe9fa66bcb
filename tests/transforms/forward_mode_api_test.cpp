// The dual-tensor API at its edges: make_dual on a tensor that already has a tangent at the
// level (an error, as in PyTorch, leaving the input as it was), unpack_dual of an undefined
// tensor, tangents of the wrong dtype from a JVP rule (built-in or custom), and set_data,
// which replaces the values and so drops their tangents.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/apply.h"
#include "support/expect.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_error;
using adjoint::testing::expect_values;

Tensor f64(std::initializer_list<double> v) { return tensor(v, DType::Float64); }

TEST(MakeDual, TangentAtTheSameLevelIsAnErrorAndTheInputKeepsItsOwn) {
  DualLevel level;
  Tensor d = make_dual(f64({1.0, 2.0}), f64({3.0, 4.0}));
  expect_error(
      [&] {
        make_dual(d, f64({-1.0, -1.0}));
      },
      ErrorKind::Autograd, {"[make_dual]", "[2] (float64)", "already has a tangent"});
  expect_values(d.tangent(), {3, 4});
  // The way to another tangent: a dual of the primal.
  Tensor d2 = make_dual(unpack_dual(d).first, f64({-1.0, 0.5}));
  expect_values(d2.tangent(), {-1, 0.5});
  expect_values(d.tangent(), {3, 4});
  expect_values(exp(d2).tangent(), {-std::exp(1.0), 0.5 * std::exp(2.0)});
}

TEST(MakeDual, TangentAtAnOuterLevelIsKept) {
  DualLevel outer;
  Tensor x = make_dual(f64({0.5}), f64({2.0}));
  Tensor y;
  {
    DualLevel inner;
    y = make_dual(x, f64({3.0}));  // a new level: allowed
    expect_values(y.tangent(), {3});
  }
  expect_values(y.tangent(), {2});
  expect_values(x.tangent(), {2});
}

TEST(MakeDual, MismatchedTangentsAreNamed) {
  DualLevel level;
  expect_error(
      [] {
        make_dual(f64({1.0, 2.0}), tensor({1.0f, 2.0f}));
      },
      ErrorKind::DType, {"[make_dual]", "[2] (float32)", "[2] (float64)"});
  expect_error(
      [] {
        make_dual(f64({1.0, 2.0}), f64({1.0}));
      },
      ErrorKind::Shape, {"[make_dual]", "[1] (float64)", "[2] (float64)"});
}

TEST(UnpackDual, UndefinedTensorIsAnError) {
  expect_error([] { unpack_dual(Tensor()); }, ErrorKind::Value, {"[unpack_dual]", "undefined"});
  DualLevel level;
  expect_error([] { unpack_dual(Tensor()); }, ErrorKind::Value, {"[unpack_dual]", "undefined"});
}

// A JVP rule that returns a float32 tangent for a float64 output.
struct Float32Tangent {
  static constexpr const char* name = "float32_tangent";
  static constexpr Save save = Save::None;
  Tensor forward(const Tensor& x) const { return x.detach() * 2.0; }
  Tensor vjp(const Ctx&, const Tensor& gy) const { return gy * 2.0; }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return (tx * 2.0).to(DType::Float32); }
};

TEST(CheckTangent, BuiltInRuleOfAnotherDtypeIsAnError) {
  DualLevel level;
  const Tensor d = make_dual(f64({1.0, 2.0}), f64({1.0, 1.0}));
  expect_error([&] { apply(Float32Tangent{}, d); }, ErrorKind::DType,
               {"[float32_tangent]", "[2] (float32)", "[2] (float64)"});
  // Without a tangent the rule never runs.
  expect_values(apply(Float32Tangent{}, f64({1.0, 2.0})), {2, 4});
}

struct DoubleWithFloat32Jvp : Function<DoubleWithFloat32Jvp> {
  static Tensor forward(FunctionCtx&, const Tensor& x) { return x * 2.0; }
  static std::vector<Tensor> backward(FunctionCtx&, std::vector<Tensor> g) { return {g[0] * 2.0}; }
  static std::vector<Tensor> jvp(FunctionCtx&, std::vector<Tensor> t) {
    return {(t[0] * 2.0).to(DType::Float32)};
  }
  static std::string name() { return "DoubleWithFloat32Jvp"; }
};

TEST(CheckTangent, CustomJvpOfAnotherDtypeIsAnError) {
  DualLevel level;
  const Tensor d = make_dual(f64({1.0, 2.0, 3.0}), f64({1.0, 1.0, 1.0}));
  expect_error([&] { DoubleWithFloat32Jvp::apply(d); }, ErrorKind::DType,
               {"DoubleWithFloat32Jvp", "[3] (float32)", "[3] (float64)"});
}

TEST(SetData, DropsTangentsAtEveryLevel) {
  DualLevel outer;
  Tensor x = make_dual(f64({1.0, 2.0}), f64({3.0, 4.0}));
  DualLevel inner;
  Tensor d = make_dual(x, f64({5.0, 6.0}));
  ASSERT_EQ(d.impl()->autograd->tangents.size(), 2u);
  d.set_data(f64({7.0, 8.0}));  // same shape and dtype: the tangents still go
  expect_values(d, {7, 8});
  EXPECT_FALSE(d.tangent().defined());
  EXPECT_TRUE(d.impl()->autograd->tangents.empty());
  EXPECT_FALSE(exp(d).tangent().defined()) << "ops must not see the old tangent either";
  // x keeps its own values and its (outer) tangent.
  expect_values(x, {1, 2});
  ASSERT_EQ(x.impl()->autograd->tangents.size(), 1u);
  expect_values(x.impl()->autograd->tangents[0].value, {3, 4});
}

}  // namespace
