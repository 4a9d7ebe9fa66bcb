// Every user mistake throws adjoint::Error of the right kind, with a message that names the op
// ("[add] ...") and the shapes and dtypes involved: broadcasting, dims, dtypes, autograd misuse,
// malformed factory arguments, views and element access. Matmul and indexing errors are tested
// with those ops.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::testing;

namespace {

TensorOptions f32_grad() { return TensorOptions(DType::Float32).requires_grad(true); }

}  // namespace

TEST(Errors, ErrorCarriesKindAndOp) {
  try {
    ones({2, 3}) + ones({4, 3});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Shape);
    EXPECT_EQ(e.op(), "add");
    EXPECT_EQ(std::string(e.what()).rfind("[add] ", 0), 0u) << e.what();
  }
  // adjoint::Error is a std::runtime_error, so generic handlers catch it.
  EXPECT_THROW(ones({2}) + ones({3}), std::runtime_error);
}

// ---- shapes and dims ----

TEST(Errors, BroadcastMismatch) {
  expect_error(
      [] {
        ones({2, 3}) + ones({4, 3});
      },
      ErrorKind::Shape, {"[add]", "[2, 3]", "[4, 3]"});
  expect_error(
      [] {
        ones({2, 3}) * ones({3, 2});
      },
      ErrorKind::Shape, {"[mul]", "[2, 3]", "[3, 2]"});
  expect_error([] { ones({5}) - ones({4}); }, ErrorKind::Shape, {"[sub]", "[5]", "[4]"});
  expect_error([] { ones({5}) / ones({2, 4}); }, ErrorKind::Shape, {"[div]", "[5]", "[2, 4]"});
  expect_error([] { ones({3}).eq(ones({2})); }, ErrorKind::Shape, {"[eq]", "[3]", "[2]"});
}

TEST(Errors, BroadcastMismatchWhileRecording) {
  Tensor x = ones({2, 3}, f32_grad());
  expect_error([&] { x* ones({4, 3}); }, ErrorKind::Shape, {"[mul]", "[2, 3]", "[4, 3]"});
}

TEST(Errors, InPlaceBroadcastMismatch) {
  // The result of an in-place op must keep the tensor's shape.
  Tensor x = ones({3});
  expect_error([&] { x.add_(ones({2, 3})); }, ErrorKind::Shape, {"add_", "[3]", "[2, 3]"});
  EXPECT_EQ(x.version(), 0u);
}

TEST(Errors, DimOutOfRange) {
  Tensor x = ones({2, 3});
  expect_error([&] { x.sum({5}); }, ErrorKind::Index, {"[sum]", "5", "2 dims"});
  expect_error([&] { x.sum({-3}); }, ErrorKind::Index, {"[sum]", "-3"});
  expect_error([&] { x.mean({2}); }, ErrorKind::Index, {"[mean]", "2"});
  expect_error([&] { x.transpose(0, 2); }, ErrorKind::Index, {"[transpose]", "2"});
  expect_error([&] { x.unsqueeze(4); }, ErrorKind::Index, {"[unsqueeze]", "4"});
  expect_error([&] { x.size(2); }, ErrorKind::Index, {"2"});
}

TEST(Errors, RepeatedDim) {
  expect_error([] { ones({2, 3}).sum({1, -1}); }, ErrorKind::Value, {"[sum]"});
  expect_error([] { ones({2, 3}).permute({0, 0}); }, ErrorKind::Value, {"[permute]"});
}

TEST(Errors, PermuteWrongLength) {
  expect_error([] { ones({2, 3}).permute({0}); }, ErrorKind::Shape, {"[permute]", "[2, 3]"});
}

TEST(Errors, ExpandIncompatible) {
  expect_error(
      [] {
        ones({2, 3}).expand({4, 3});
      },
      ErrorKind::Shape, {"[expand]", "[2, 3]", "[4, 3]"});
  expect_error([] { ones({2, 3}).expand({3}); }, ErrorKind::Shape, {"[expand]", "[2, 3]"});
}

TEST(Errors, ViewOfNonContiguous) {
  Tensor t = ones({2, 3}).transpose(0, 1);
  ASSERT_FALSE(t.is_contiguous());
  expect_error([&] { t.view({6}); }, ErrorKind::Shape, {"[view]", "[3, 2]", "reshape"});
  // reshape copies instead.
  EXPECT_EQ(t.reshape({6}).shape(), (Shape{6}));
}

TEST(Errors, ReshapeToWrongNumel) {
  Tensor t = ones({2, 3});
  expect_error([&] { t.reshape({4}); }, ErrorKind::Shape, {"[reshape]", "[4]", "[2, 3]"});
  expect_error([&] { t.view({5, -1}); }, ErrorKind::Shape, {"[view]", "[5, -1]", "[2, 3]"});
  expect_error([&] { t.reshape({-1, -1}); }, ErrorKind::Shape, {"[reshape]", "-1"});
}

// ---- dtypes ----

TEST(Errors, DTypeUnsupportedByOp) {
  Tensor b = tensor(std::vector<bool>{true, false});
  Tensor i = tensor(std::vector<int64_t>{1, 2});
  expect_error([&] { b.neg(); }, ErrorKind::DType, {"[neg]", "bool"});
  expect_error([&] { i.mean(); }, ErrorKind::DType, {"[mean]", "int64"});
  expect_error([&] { b - b; }, ErrorKind::DType, {"[sub]", "bool"});
  expect_error([&] { b.clamp(0.0, 1.0); }, ErrorKind::DType, {"[clamp]", "bool"});
  expect_error([&] { where(i, i, i); }, ErrorKind::DType, {"[where]", "int64"});
}

TEST(Errors, FloatingOpsPromoteIntegersAndBools) {
  // As in PyTorch, exp and sin of bool or int64 tensors are computed in float32.
  Tensor b = tensor(std::vector<bool>{true, false});
  Tensor i = tensor(std::vector<int64_t>{0, 1});
  EXPECT_EQ(b.exp().dtype(), DType::Float32);
  EXPECT_EQ(b.sin().dtype(), DType::Float32);
  EXPECT_EQ(i.exp().dtype(), DType::Float32);
  EXPECT_FLOAT_EQ(b.exp().to_vector<float>()[0], 2.7182817f);
}

TEST(Errors, RequiresGradOnNonFloating) {
  Tensor i = tensor(std::vector<int64_t>{1, 2});
  expect_error([&] { i.requires_grad_(); }, ErrorKind::DType, {"[requires_grad_]", "int64", "[2]"});
  expect_error([] { ones({3}, TensorOptions(DType::Bool).requires_grad(true)); }, ErrorKind::DType,
               {"[requires_grad_]", "bool"});
}

TEST(Errors, DataPtrWithWrongType) {
  Tensor f = ones({2});
  expect_error([&] { f.data_ptr<double>(); }, ErrorKind::DType,
               {"[data_ptr]", "float64", "float32"});
  expect_error([&] { f.data_ptr<int64_t>(); }, ErrorKind::DType, {"[data_ptr]", "int64"});
  EXPECT_NE(f.data_ptr<float>(), nullptr);
}

TEST(Errors, ItemOnMultiElementTensor) {
  expect_error([] { ones({3}).item<float>(); }, ErrorKind::Value, {"[item]", "3", "[3]"});
  expect_error([] { ones({0}).item<float>(); }, ErrorKind::Value, {"[item]", "0"});
  EXPECT_EQ(ones({1, 1}).item<float>(), 1.0f);
}

TEST(Errors, UndefinedTensor) {
  Tensor u;
  expect_error([&] { u.shape(); }, ErrorKind::Value, {"undefined"});
  expect_error([&] { u.requires_grad_(); }, ErrorKind::Value, {"[requires_grad_]", "undefined"});
  expect_error([&] { ones({2}) + u; }, ErrorKind::Value, {"[add]", "undefined"});
}

// ---- autograd misuse ----

TEST(Errors, BackwardOnNonScalarWithoutGradient) {
  Tensor x = ones({2, 3}, f32_grad());
  Tensor y = x * 2;
  expect_error([&] { y.backward(); }, ErrorKind::Autograd, {"[backward]", "[2, 3]", "float32"});
  expect_error([&] { autograd::grad({y}, {x}); }, ErrorKind::Autograd, {"[grad]", "[2, 3]"});
}

TEST(Errors, BackwardGradientOfWrongShape) {
  Tensor x = ones({2, 3}, f32_grad());
  Tensor y = x * 2;
  expect_error(
      [&] {
        y.backward(ones({3, 2}));
      },
      ErrorKind::Shape, {"[backward]", "[3, 2]", "[2, 3]"});
  expect_error(
      [&] {
        autograd::backward({y}, {ones({2, 3}), ones({2, 3})});
      },
      ErrorKind::Value, {"[backward]", "2 gradients", "1 outputs"});
}

TEST(Errors, BackwardTwice) {
  Tensor x = ones({3}, f32_grad());
  Tensor loss = x.exp().sum();
  loss.backward();
  expect_error([&] { loss.backward(); }, ErrorKind::Autograd,
               {"[backward]", "ExpBackward", "retain_graph"});
}

TEST(Errors, InPlaceOnSavedTensor) {
  Tensor x = ones({2, 2}, f32_grad());
  Tensor y = x.sigmoid();  // saves y
  y.mul_(2);
  expect_error([&] { y.sum().backward(); }, ErrorKind::Autograd,
               {"[backward]", "SigmoidBackward", "[2, 2]", "float32", "version 0", "version 1"});
}

TEST(Errors, InPlaceOnLeafThatRequiresGrad) {
  Tensor x = ones({2}, f32_grad());
  expect_error([&] { x.mul_(2); }, ErrorKind::Autograd, {"[mul_]", "leaf", "[2]", "NoGradGuard"});
}

TEST(Errors, GradOfTensorThatDoesNotRequireGrad) {
  Tensor x = ones({2}, f32_grad());
  Tensor c = ones({2});
  Tensor y = (x * c).sum();
  expect_error([&] { autograd::grad({y}, {c}); }, ErrorKind::Autograd,
               {"[grad]", "does not require grad", "[2]"});
  expect_error([&] { c.sum().backward(); }, ErrorKind::Autograd,
               {"[backward]", "does not require grad"});
  expect_error([&] { c.retain_grad(); }, ErrorKind::Autograd, {"[retain_grad]"});
}

TEST(Errors, UnusedInputToGrad) {
  Tensor x = ones({2}, f32_grad());
  Tensor z = ones({4}, f32_grad());
  Tensor y = (x * 2).sum();
  expect_error([&] { autograd::grad({y}, {z}); }, ErrorKind::Autograd,
               {"[grad]", "[4]", "allow_unused"});
}

TEST(Errors, RequiresGradFalseOnNonLeaf) {
  Tensor x = ones({2}, f32_grad());
  Tensor y = x * 2;
  expect_error([&] { y.requires_grad_(false); }, ErrorKind::Autograd, {"[requires_grad_]", "leaf"});
}

TEST(Errors, SetGradOfWrongShape) {
  Tensor x = ones({2}, f32_grad());
  expect_error([&] { x.set_grad(ones({3})); }, ErrorKind::Shape, {"[set_grad]", "[3]", "[2]"});
}

// ---- factories ----

TEST(Errors, NegativeSize) {
  expect_error([] { zeros({2, -1}); }, ErrorKind::Value, {"[zeros]", "-1", "[2, -1]"});
  expect_error([] { ones({-3}); }, ErrorKind::Value, {"[ones]", "-3"});
  expect_error([] { full({-3}, 1.0); }, ErrorKind::Value, {"[full]", "-3"});
  expect_error([] { empty({-3}); }, ErrorKind::Value, {"[empty]", "-3"});
  expect_error([] { randn({-3}); }, ErrorKind::Value, {"[randn]", "-3"});
}

TEST(Errors, TensorDataLengthMismatch) {
  expect_error(
      [] {
        tensor(std::vector<float>{1, 2, 3}, Shape{2, 2});
      },
      ErrorKind::Shape, {"[tensor]", "[2, 2]", "4", "3"});
  expect_error([] { tensor({1.0, 2.0}, Shape{3}); }, ErrorKind::Shape, {"[tensor]", "[3]"});
}

TEST(Errors, ArangeStepZero) {
  expect_error([] { arange(0, 10, 0); }, ErrorKind::Value, {"[arange]", "step"});
  expect_error([] { arange(0, 10, -1); }, ErrorKind::Value, {"[arange]"});
}

TEST(Errors, RandintEmptyRange) {
  expect_error([] { randint(5, 5, {3}); }, ErrorKind::Value, {"[randint]", "5"});
  expect_error([] { randint(7, 2, {3}); }, ErrorKind::Value, {"[randint]", "7", "2"});
}

TEST(Errors, LinspaceNegativeSteps) {
  expect_error([] { linspace(0, 1, -2); }, ErrorKind::Value, {"[linspace]", "-2"});
}

TEST(Errors, EyeNegativeSize) {
  expect_error([] { eye(-1); }, ErrorKind::Value, {"[eye]", "-1"});
}

// ---- misc ----

TEST(Errors, ClampWithoutBounds) {
  expect_error([] { ones({2}).clamp(std::nullopt, std::nullopt); }, ErrorKind::Value, {"[clamp]"});
}

TEST(Errors, IntegerToNegativePower) {
  Tensor i = tensor(std::vector<int64_t>{2, 3});
  expect_error([&] { i.pow(-1); }, ErrorKind::Value, {"[pow]", "negative"});
}
