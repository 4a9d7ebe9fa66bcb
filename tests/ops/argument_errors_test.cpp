// User mistakes that used to reach an internal assertion, pass silently or blame the wrong op:
// a floating alpha with integer add/sub (PyTorch's alpha_check), layer_norm over a normalized
// shape of no elements with backward, set_num_threads with a count below 1, and the inf-norm
// of an empty input (reported by amax). Each must be a named adjoint::Error, or work.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {
Tensor ints(std::vector<int64_t> v) { return tensor(v); }
const double kInf = std::numeric_limits<double>::infinity();
}  // namespace

TEST(AddAlpha, FloatingAlphaWithIntegerTensorsIsADTypeErrorAsPyTorch) {
  // Was: y * 2.0 became float32 and the add kernel's equal-dtype assertion fired.
  for (auto op : {+[](const Tensor&a, const Tensor&b, Scalar s) { return add(a, b, s); },
                  +[](const Tensor&a, const Tensor&b, Scalar s) { return sub(a, b, s); }}) {
    expect_error(
        [&] {
          op(ints({1, 2}), ints({3, 4}), 2.0);
        },
        ErrorKind::DType, {"argument alpha must not be a floating point number"});
    expect_error(
        [&] {
          op(ints({1, 2}), ints({3, 4}), true);
        },
        ErrorKind::DType, {"boolean alpha"});
  }
  expect_error([] { add(ints({1}), ints({3}), 0.5); }, ErrorKind::DType, {"[add]"});
  expect_error([] { sub(ints({1}), ints({3}), 0.5); }, ErrorKind::DType, {"[sub]"});
}

TEST(AddAlpha, IntegerAlphaWithIntegersAndFloatingAlphaWithFloatsWork) {
  EXPECT_EQ(add(ints({1, 2}), ints({3, 4}), 2).to_vector<int64_t>(), (std::vector<int64_t>{7, 10}));
  EXPECT_EQ(sub(ints({1, 2}), ints({3, 4}), 2).to_vector<int64_t>(),
            (std::vector<int64_t>{-5, -6}));
  // the result is floating when either input is: then a floating alpha is fine
  Tensor r = add(ints({1, 2}), tensor({0.5, 0.5}), 2.5);
  EXPECT_EQ(r.dtype(), DType::Float32);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{2.25f, 3.25f}));
}

TEST(LayerNorm, EmptyNormalizedShapeHasEmptyGradientsNotAnInternalError) {
  // x [2, 0] over its last dim: nothing to normalize, so y and every gradient are empty (as in
  // PyTorch, which returns empty tensors). Was: the backward kernel's row count came out 0
  // against 2 rows of statistics, an internal assertion.
  Tensor x = zeros({2, 0}, TensorOptions(DType::Float64).requires_grad(true));
  Tensor w = ones({0}, TensorOptions(DType::Float64).requires_grad(true));
  Tensor b = zeros({0}, TensorOptions(DType::Float64).requires_grad(true));
  Tensor y = layer_norm(x, {0}, w, b);
  EXPECT_EQ(y.shape(), (Shape{2, 0}));
  y.sum().backward();
  EXPECT_EQ(x.grad().shape(), (Shape{2, 0}));
  EXPECT_EQ(w.grad().shape(), (Shape{0}));
  EXPECT_EQ(b.grad().shape(), (Shape{0}));
  // without affine parameters, and through the module
  Tensor x2 = zeros({3, 0}, TensorOptions(DType::Float64).requires_grad(true));
  layer_norm(x2, {0}).sum().backward();
  EXPECT_EQ(x2.grad().shape(), (Shape{3, 0}));
  nn::LayerNorm ln(0);
  Tensor x3 = zeros({4, 0}, TensorOptions().requires_grad(true));
  ln.forward(x3).sum().backward();
  EXPECT_EQ(x3.grad().shape(), (Shape{4, 0}));
}

TEST(Threads, SetNumThreadsRefusesCountsBelowOne) {
  const int before = get_num_threads();
  for (int n : {-3, 0, 1 << 20})
    expect_error([&] { set_num_threads(n); }, ErrorKind::Value,
                 {"[set_num_threads]", std::to_string(n)});
  EXPECT_EQ(get_num_threads(), before);
  set_num_threads(1);
  EXPECT_EQ(get_num_threads(), 1);
  set_num_threads(before);
}

TEST(Norm, InfinityNormOfAnEmptyInputIsReportedByNorm) {
  // Was: "[amax] cannot reduce an empty input", naming an op the user never called.
  expect_error([] { norm(zeros({0}), kInf); }, ErrorKind::Shape,
               {"[norm]", "inf-norm", "[0] (float32)"});
  expect_error(
      [] {
        norm(zeros({2, 0}, DType::Float64), -kInf);
      },
      ErrorKind::Shape, {"[norm]", "-inf-norm", "[2, 0] (float64)"});
  expect_error([] { norm(zeros({3, 0}), kInf, {1}); }, ErrorKind::Shape, {"[norm]", "[3, 0]"});
  // empty only along kept dims: an empty result, no error; other norms of nothing are 0
  EXPECT_EQ(norm(zeros({0, 3}), kInf, {1}).shape(), (Shape{0}));
  EXPECT_EQ(norm(zeros({0}), 2.0).item<float>(), 0.0f);
  EXPECT_EQ(norm(zeros({0}), 1.0).item<float>(), 0.0f);
}

TEST(InPlace, IntegerAlphaCheckAndBoundsOfClampMatchPyTorch) {
  Tensor a = ints({1, 2});
  expect_error([&] { a.add_(ints({3, 4}), 2.0); }, ErrorKind::DType, {"[add_]", "alpha"});
  expect_error([&] { a.sub_(ints({3, 4}), 2.0); }, ErrorKind::DType, {"[sub_]", "alpha"});
  a.add_(ints({3, 4}), 2);
  EXPECT_EQ(a.to_vector<int64_t>(), (std::vector<int64_t>{7, 10}));
  // -INT64_MIN wraps to itself as int64 arithmetic does (it was a signed overflow)
  Tensor m = ints({5});
  m.sub_(std::numeric_limits<int64_t>::min());
  EXPECT_EQ(m.to_vector<int64_t>()[0],
            static_cast<int64_t>(5 + static_cast<uint64_t>(std::numeric_limits<int64_t>::min())));
  Tensor b = tensor(std::vector<bool>{true, false});
  expect_error([&] { b.clamp_(0.0, 1.0); }, ErrorKind::DType, {"[clamp_]", "bool"});
  Tensor i = ints({-3, 4});
  expect_error([&] { i.clamp_(0.5, std::nullopt); }, ErrorKind::DType,
               {"[clamp_]", "not an integer"});
  i.clamp_(0.0, 2.0);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{0, 2}));
}
