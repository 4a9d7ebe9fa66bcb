// The convolution layers: parameters by name and shape, the forward against the functional
// convolution of the layer's own parameters (and a hand loop for Conv1d), gradients reaching
// weight and bias, PyTorch's default initialisation bounds (fan_in from the weight's dim 1:
// in / groups for a convolution, out / groups for a transposed one), and errors naming the layer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {

std::vector<double> values(const Tensor& t) {
  return t.contiguous().to(DType::Float64).to_vector<double>();
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], tol) << "at " << i;
}

// Every value within ±bound, the largest close to it, and the variance of U(-bound, bound).
void expect_uniform(const Tensor& t, double bound) {
  const std::vector<double> v = values(t);
  double sq = 0, top = 0;
  for (double x : v) {
    EXPECT_LE(std::abs(x), bound * (1 + 1e-6));
    sq += x * x;
    top = std::max(top, std::abs(x));
  }
  EXPECT_GT(top, 0.98 * bound);
  const double var = sq / static_cast<double>(v.size());
  EXPECT_NEAR(var, bound * bound / 3, 0.1 * bound * bound / 3);
}

}  // namespace

TEST(Conv2dLayer, ParametersAndForwardAreTheFunctionalConvolution) {
  Generator gen(1);
  nn::Conv2d conv(4, 6, {3, 2}, {2, 1}, {1, 0}, 1, 2, true, &gen);
  conv.to(DType::Float64);
  const auto params = conv.named_parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0].first, "weight");
  EXPECT_EQ(params[1].first, "bias");
  EXPECT_EQ(conv.weight.shape(), (Shape{6, 2, 3, 2}));
  EXPECT_EQ(conv.bias.shape(), (Shape{6}));
  const Tensor x = randn({2, 4, 7, 5}, DType::Float64, &gen);
  const Tensor y = conv(x);
  expect_near_all(values(y), values(conv2d(x, conv.weight, conv.bias, {2, 1}, {1, 0}, 1, 2)), 0);
  EXPECT_EQ(conv(x.select(0, 1)).shape(), (Shape{6, 4, 4}));  // unbatched

  const Tensor g = randn(y.shape(), DType::Float64, &gen);
  (y * g).sum().backward();
  // db = Σ g over batch and space
  expect_near_all(values(conv.bias.grad()), values(g.sum({0, 2, 3})), 1e-12);
  const Tensor w = conv.weight.detach().requires_grad_(true);
  (conv2d(x, w, {}, {2, 1}, {1, 0}, 1, 2) * g).sum().backward();
  expect_near_all(values(conv.weight.grad()), values(w.grad()), 1e-12);
}

TEST(Conv2dLayer, SamePaddingWithoutBias) {
  Generator gen(2);
  nn::Conv2d conv(3, 5, 4, 1, "same", 1, 1, false, &gen);
  EXPECT_FALSE(conv.bias.defined());
  EXPECT_EQ(conv.named_parameters().size(), 1u);
  const Tensor x = randn({2, 3, 6, 7}, {}, &gen);
  const Tensor y = conv(x);
  EXPECT_EQ(y.shape(), (Shape{2, 5, 6, 7}));
  expect_near_all(values(y), values(conv2d(x, conv.weight, {}, 1, "same")), 0);
}

TEST(Conv1dLayer, MatchesALoop) {
  Generator gen(3);
  nn::Conv1d conv(2, 3, 3, 2, 1, 1, 1, true, &gen);
  conv.to(DType::Float64);
  const Tensor x = randn({1, 2, 8}, DType::Float64, &gen);
  const Tensor y = conv(x);
  ASSERT_EQ(y.shape(), (Shape{1, 3, 4}));
  const std::vector<double> xv = values(x), w = values(conv.weight), b = values(conv.bias);
  std::vector<double> want;
  for (int o = 0; o < 3; ++o)
    for (int l = 0; l < 4; ++l) {
      double s = b[o];
      for (int c = 0; c < 2; ++c)
        for (int k = 0; k < 3; ++k) {
          const int i = l * 2 - 1 + k;
          if (i >= 0 && i < 8) s += xv[c * 8 + i] * w[(o * 2 + c) * 3 + k];
        }
      want.push_back(s);
    }
  expect_near_all(values(y), want, 1e-12);
}

TEST(ConvTranspose2dLayer, WeightIsInByOutAndForwardIsTheFunctional) {
  Generator gen(4);
  nn::ConvTranspose2d up(4, 6, 3, 2, 1, 1, 2, true, 1, &gen);
  EXPECT_EQ(up.weight.shape(), (Shape{4, 3, 3, 3}));
  EXPECT_EQ(up.bias.shape(), (Shape{6}));
  const Tensor x = randn({2, 4, 5, 5}, {}, &gen);
  const Tensor y = up(x);
  EXPECT_EQ(y.shape(), (Shape{2, 6, 10, 10}));  // (5 - 1) 2 - 2 + 2 + 1 + 1
  expect_near_all(values(y), values(conv_transpose2d(x, up.weight, up.bias, 2, 1, 1, 2)), 0);
}

TEST(ConvLayers, PyTorchDefaultInitialisation) {
  Generator gen(5);
  // fan_in = in / groups * kH * kW = 16 / 2 * 3 * 3 = 72
  nn::Conv2d conv(16, 64, 3, 1, 0, 1, 2, true, &gen);
  expect_uniform(conv.weight, 1.0 / std::sqrt(72.0));
  EXPECT_LE(values(conv.bias.abs().max())[0], 1.0 / std::sqrt(72.0));
  // transposed: fan_in = weight.size(1) * k = out / groups * kH * kW = 32 * 4 * 4 = 512
  nn::ConvTranspose2d up(64, 32, 4, 2, 1, 0, 1, true, 1, &gen);
  expect_uniform(up.weight, 1.0 / std::sqrt(512.0));
  // conv1d: fan_in = 8 * 5
  nn::Conv1d c1(8, 200, 5, 1, 0, 1, 1, true, &gen);
  expect_uniform(c1.weight, 1.0 / std::sqrt(40.0));
  expect_uniform(c1.bias, 1.0 / std::sqrt(40.0));
}

TEST(ConvLayers, ErrorsNameTheLayer) {
  nn::Conv2d conv(3, 4, 3);
  expect_error(
      [&] {
        conv(zeros({2, 5, 8, 8}));
      },
      ErrorKind::Shape, {"nn.Conv2d", "expected 3 input channels, got 5", "[2, 5, 8, 8]"});
  expect_error([&] { conv(zeros({8, 8})); }, ErrorKind::Shape, {"nn.Conv2d", "[8, 8]"});
  expect_error([&] { nn::Conv2d(6, 4, 3, 1, 0, 1, 4); }, ErrorKind::Value,
               {"nn.Conv2d", "groups (4)"});
  expect_error([&] { nn::Conv1d(2, 2, {3, 3}); }, ErrorKind::Value, {"nn.Conv1d", "kernel_size"});
  nn::ConvTranspose2d up(2, 2, 2);
  expect_error(
      [&] {
        up(zeros({1, 3, 4, 4}));
      },
      ErrorKind::Shape, {"nn.ConvTranspose2d", "expected 2 input channels"});
}
