// Each error of the transforms: grad of a non-scalar, tangents and cotangents of the wrong
// shape or dtype or count, argnums out of range or repeated, integer arguments, and an input
// that does not influence the output when that is asked to be an error.
#include <gtest/gtest.h>

#include "support/expect.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_error;

Tensor f64(std::initializer_list<double> v) { return tensor(v, DType::Float64); }
Tensor square(const Tensor& x) { return x * x; }
Tensor sum_square(const Tensor& x) { return (x * x).sum(); }

TEST(TransformErrors, GradOfNonScalar) {
  expect_error(
      [] {
        grad(square)(f64({1.0, 2.0}));
      },
      ErrorKind::Shape, {"[grad]", "scalar", "[2] (float64)", "jacrev"});
  expect_error([] { hessian(square)(f64({1.0, 2.0})); }, ErrorKind::Shape, {"[hessian]", "scalar"});
  expect_error(
      [] {
        hvp(square, f64({1.0, 2.0}), f64({1.0, 1.0}));
      },
      ErrorKind::Shape, {"[hvp]", "scalar"});
}

TEST(TransformErrors, TangentShapeDtypeAndCount) {
  expect_error(
      [] {
        jvp(square, f64({1.0, 2.0}), f64({1.0}));
      },
      ErrorKind::Shape, {"[jvp]", "tangent 0", "[1] (float64)", "primal 0", "[2] (float64)"});
  expect_error([] { jvp(square, f64({1.0}), tensor({1.0f})); }, ErrorKind::DType,
               {"[jvp]", "tangent 0", "float32", "float64"});
  expect_error(
      [] {
        auto f = [](const std::vector<Tensor>& xs) { return xs[0] * xs[1]; };
        jvp(f, {f64({1.0}), f64({2.0})}, {f64({1.0})});
      },
      ErrorKind::Value, {"[jvp]", "1 tangent", "2 primals"});
  expect_error(
      [] {
        hvp(sum_square, f64({1.0, 2.0}), f64({1.0}));
      },
      ErrorKind::Shape, {"[hvp]", "tangent 0"});
  expect_error(
      [] {
        hvp(sum_square, f64({1.0, 2.0}), f64({1.0}), HvpMode::ReverseOverReverse);
      },
      ErrorKind::Shape, {"[hvp]", "tangent 0"});
}

TEST(TransformErrors, CotangentShapeDtypeAndCount) {
  auto [y, pullback] = vjp(square, f64({1.0, 2.0}));
  expect_error(
      [&] {
        pullback(f64({1.0, 2.0, 3.0}));
      },
      ErrorKind::Shape, {"[vjp]", "cotangent 0", "[3] (float64)", "output 0", "[2] (float64)"});
  expect_error(
      [&] {
        pullback(tensor({1.0f, 2.0f}));
      },
      ErrorKind::DType, {"[vjp]", "cotangent 0", "float32"});
  auto two = [](const Tensor& x) { return std::vector<Tensor>{x, x * 2}; };
  auto r = vjp(two, f64({1.0}));
  expect_error([&] { r.pullback({f64({1.0})}); }, ErrorKind::Value,
               {"[vjp]", "1 cotangent", "2 outputs"});
}

TEST(TransformErrors, Argnums) {
  auto f = [](const Tensor& x, const Tensor& y) { return (x * y).sum(); };
  expect_error([&] { grad(f, 2)(f64({1.0}), f64({2.0})); }, ErrorKind::Index,
               {"[grad]", "argnums 2", "out of range", "2 arguments"});
  expect_error([&] { grad(f, -1)(f64({1.0}), f64({2.0})); }, ErrorKind::Index,
               {"argnums -1", "out of range"});
  expect_error(
      [&] {
        grad(f, {0, 0})(f64({1.0}), f64({2.0}));
      },
      ErrorKind::Value, {"argnums 0", "twice"});
  expect_error([&] { jacrev(f, 5)(f64({1.0}), f64({2.0})); }, ErrorKind::Index, {"[jacrev]"});
  expect_error([&] { jacfwd(f, 5)(f64({1.0}), f64({2.0})); }, ErrorKind::Index, {"[jacfwd]"});
  expect_error([&] { hessian(f, 5)(f64({1.0}), f64({2.0})); }, ErrorKind::Index, {"[hessian]"});
}

TEST(TransformErrors, IntegerArgumentsAndOutputs) {
  auto f = [](const Tensor& x) { return x.to(DType::Float64).sum(); };
  expect_error(
      [&] {
        grad(f)(tensor(std::vector<int64_t>{1, 2}));
      },
      ErrorKind::DType, {"[grad]", "argument 0", "int64", "floating"});
  auto to_int = [](const Tensor& x) { return x.to(DType::Int64); };
  expect_error([&] { jacrev(to_int)(f64({1.0})); }, ErrorKind::DType,
               {"[jacrev]", "output 0", "int64"});
  expect_error([&] { jacfwd(to_int)(f64({1.0})); }, ErrorKind::DType,
               {"[jacfwd]", "output 0", "int64"});
}

TEST(TransformErrors, UnusedInputWhenAskedToBeAnError) {
  auto f = [](const Tensor& x, const Tensor& y) { return (x * 2).sum(); };
  expect_error([&] { grad(f, 1, Unused::Error)(f64({1.0}), f64({2.0})); }, ErrorKind::Autograd,
               {"[grad]", "argument 1", "does not influence the output"});
  expect_error([&] { jacrev(f, 1, Unused::Error)(f64({1.0}), f64({2.0})); }, ErrorKind::Autograd,
               {"[jacrev]", "argument 1"});
  // An output that depends on nothing differentiable at all.
  auto constant = [](const Tensor&) { return f64({3.0}).sum(); };
  expect_error([&] { grad(constant, 0, Unused::Error)(f64({1.0})); }, ErrorKind::Autograd,
               {"argument 0"});
}

}  // namespace
