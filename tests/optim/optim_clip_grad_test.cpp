// clip_grad_norm_ and clip_grad_value_: the returned total norm (2, 1, inf and fractional p)
// recomputed by hand, the scale factor max_norm / (norm + 1e-6), no scaling below max_norm,
// skipped parameters, non-finite norms, expanded gradients, and bad arguments.
#include <gtest/gtest.h>

#include "optim/optim_test_util.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::optim_test;
using adjoint::testing::expect_error;

TEST(ClipGradNorm, ReturnsTheTotalNormAndScales) {
  Tensor a = param({3.0, 0.0}), b = param({4.0, 12.0}, Shape{2, 1}), c = param({7.0});
  set_grad(a, {3.0, 0.0});
  set_grad(b, {4.0, 12.0});  // c has no gradient: skipped
  const double norm = optim::clip_grad_norm_({a, b, c}, 6.5);
  EXPECT_DOUBLE_EQ(norm, 13.0);  // sqrt(9 + 16 + 144)
  const double f = 6.5 / (13.0 + 1e-6);
  expect_near(a.grad(), {3.0 * f, 0.0}, 1e-15);
  expect_near(b.grad(), {4.0 * f, 12.0 * f}, 1e-15);
  EXPECT_FALSE(c.grad().defined());
}

TEST(ClipGradNorm, NoScalingBelowMaxNorm) {
  Tensor a = param({0.0, 0.0});
  set_grad(a, {0.3, -0.4});
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm_({a}, 1.0), 0.5);
  expect_near(a.grad(), {0.3, -0.4}, 0);  // untouched, bit for bit
}

TEST(ClipGradNorm, OtherNorms) {
  auto make = [] {
    Tensor a = param({0, 0, 0}), b = param({0});
    set_grad(a, {1.0, -2.0, 0.5});
    set_grad(b, {-4.0});
    return std::vector<Tensor>{a, b};
  };
  std::vector<Tensor> ps = make();
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm_(ps, 100, INFINITY), 4.0);
  ps = make();
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm_(ps, 100, 1), 7.5);
  ps = make();
  const double p3 = std::pow(1 + 8 + 0.125 + 64, 1.0 / 3);
  EXPECT_NEAR(optim::clip_grad_norm_(ps, 1.0, 3), p3, 1e-12);
  expect_near(ps[1].grad(), {-4.0 / (p3 + 1e-6)}, 1e-12);
  ps = make();
  const double f = 2.0 / (4.0 + 1e-6);
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm_(ps, 2.0, INFINITY), 4.0);
  expect_near(ps[0].grad(), {1.0 * f, -2.0 * f, 0.5 * f}, 1e-15);
}

TEST(ClipGradNorm, NoGradientsGiveZero) {
  Tensor a = param({1.0});
  EXPECT_EQ(optim::clip_grad_norm_({a}, 1.0), 0.0);
  EXPECT_EQ(optim::clip_grad_norm_({}, 1.0), 0.0);
}

TEST(ClipGradNorm, EmptyGradientsCountAsZero) {
  Tensor e = zeros({0}, DType::Float64).requires_grad_(true);
  e.set_grad(zeros({0}, DType::Float64));
  Tensor a = param({0.0});
  set_grad(a, {-2.0});
  EXPECT_DOUBLE_EQ(optim::clip_grad_norm_({e, a}, 1.0, INFINITY), 2.0);
}

TEST(ClipGradNorm, NonFiniteNorm) {
  Tensor a = param({0, 0}), b = param({0});
  set_grad(a, {NAN, 1.0});
  set_grad(b, {1.0});
  expect_error(
      [&] {
        optim::clip_grad_norm_({a, b}, 1.0, 2, true);
      },
      ErrorKind::Value, {"[optim.clip_grad_norm_]", "nan"});
  expect_near(b.grad(), {1.0}, 0);  // nothing scaled before the error
  // Without the check the NaN factor spreads to every gradient, as in PyTorch.
  EXPECT_TRUE(std::isnan(optim::clip_grad_norm_({a, b}, 1.0)));
  EXPECT_TRUE(std::isnan(b.grad().item<double>()));
}

TEST(ClipGradNorm, ExpandedGradientIsScaledOnce) {
  Tensor a = param({0, 0, 0});
  a.set_grad(full({1}, 2.0, DType::Float64).expand({3}));  // one element seen three times
  const double norm = optim::clip_grad_norm_({a}, 1.0);
  EXPECT_DOUBLE_EQ(norm, std::sqrt(12.0));
  const double f = 1.0 / (std::sqrt(12.0) + 1e-6);
  expect_near(a.grad(), {2 * f, 2 * f, 2 * f}, 1e-15);
}

TEST(ClipGradNorm, BadArguments) {
  Tensor a = param({1.0});
  expect_error([&] { optim::clip_grad_norm_({a}, 1.0, 0); }, ErrorKind::Value,
               {"[optim.clip_grad_norm_]", "norm_type"});
  expect_error([&] { optim::clip_grad_norm_({a}, -1.0); }, ErrorKind::Value,
               {"[optim.clip_grad_norm_]", "max_norm"});
  expect_error([&] { optim::clip_grad_norm_({Tensor()}, 1.0); }, ErrorKind::Value,
               {"[optim.clip_grad_norm_]", "undefined"});
}

TEST(ClipGradValue, ClampsEachElement) {
  Tensor a = param({0, 0, 0}), b = param({0});
  set_grad(a, {-3.0, 0.5, 2.0});
  optim::clip_grad_value_({a, b}, 1.0);
  expect_near(a.grad(), {-1.0, 0.5, 1.0}, 0);
  EXPECT_FALSE(b.grad().defined());
  expect_error([&] { optim::clip_grad_value_({a}, -1.0); }, ErrorKind::Value,
               {"[optim.clip_grad_value_]", "clip_value"});
}
