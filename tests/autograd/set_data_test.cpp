// Tensor::set_data: a leaf keeps its identity (handles, requires_grad) while its values,
// shape and dtype change; a graph that saved the old data refuses to run backward.
#include <gtest/gtest.h>

#include "support/expect.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_error;
using adjoint::testing::expect_values;
using adjoint::testing::f64_grad;

TEST(SetData, EveryHandleSeesTheNewData) {
  Tensor w = tensor({1.0, 2.0}, TensorOptions().requires_grad(true));
  Tensor alias = w;  // another handle, as a tied weight or an optimizer holds
  (w * w).sum().backward();
  ASSERT_TRUE(w.grad().defined());
  w.set_data(tensor({3.0, 4.0, 5.0}, DType::Float64));
  EXPECT_EQ(alias.dtype(), DType::Float64);
  EXPECT_EQ(alias.shape(), Shape({3}));
  EXPECT_TRUE(alias.requires_grad());
  EXPECT_TRUE(alias.is_leaf());
  EXPECT_FALSE(alias.grad().defined()) << "a gradient of the old shape and dtype must go";
  (alias * alias).sum().backward();
  expect_values(w.grad(), {6.0, 8.0, 10.0});
}

TEST(SetData, KeepsGradWhenShapeAndDtypeStay) {
  Tensor w = tensor({1.0, 2.0}, f64_grad());
  (w * 3).sum().backward();
  w.set_data(tensor({7.0, 8.0}, DType::Float64));
  expect_values(w.grad(), {3.0, 3.0});
  expect_values(w, {7.0, 8.0});
}

TEST(SetData, SavedTensorNoticesReplacedData) {
  Tensor w = tensor({1.0, 2.0}, f64_grad());
  Tensor y = (w * w).sum();  // mul saves w
  w.set_data(tensor({1.0, 2.0}, DType::Float32));
  expect_error([&] { y.backward(); }, ErrorKind::Autograd, {"MulBackward", "set_data"});
}

TEST(SetData, Errors) {
  Tensor w = tensor({1.0}, f64_grad());
  Tensor y = w * 2;
  expect_error([&] { y.set_data(tensor({1.0}, DType::Float64)); }, ErrorKind::Autograd,
               {"set_data", "leaf", "MulBackward"});
  expect_error([&] { w.set_data(tensor(std::vector<int64_t>{1})); }, ErrorKind::DType,
               {"set_data", "floating", "int64"});
}

}  // namespace

namespace {

// A gradient set from an expanded tensor (elements sharing memory) still accumulates per
// element: 1 + [1, 2, 3], not the shared slot three times.
TEST(SetGrad, ExpandedGradientAccumulatesPerElement) {
  using namespace adjoint;
  Tensor a = zeros({3}, DType::Float64).requires_grad_(true);
  a.set_grad(full({1}, 1.0, DType::Float64).expand({3}));
  (a * tensor({1.0, 2.0, 3.0}, DType::Float64)).sum().backward();
  adjoint::testing::expect_values(a.grad(), {2.0, 3.0, 4.0});
}

}  // namespace
