// Tests for nn::init: sample statistics of each initialiser on large tensors against the
// distribution it promises (mean, standard deviation, bounds), the gain and fan formulas,
// determinism from a seed, that fills happen in place without recording, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn/init.h"
#include "support/expect.h"

using namespace adjoint;
namespace init = adjoint::nn::init;
using adjoint::testing::expect_error;

namespace {

struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;
};

Stats stats(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  Stats s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / static_cast<double>(v.size()));
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  return s;
}

// With n = 1e6 samples the sample mean is within 5 standard errors (5 σ/1000) and the sample
// std within a few tenths of a percent; the tolerances below are 5 standard errors.
constexpr int64_t kRows = 1000, kCols = 1000;
constexpr double kN = kRows * kCols;

void expect_uniform(const Tensor& t, double a, double b) {
  Stats s = stats(t);
  const double sd = (b - a) / std::sqrt(12.0);
  EXPECT_NEAR(s.mean, (a + b) / 2, 5 * sd / std::sqrt(kN));
  EXPECT_NEAR(s.std, sd, 5 * sd / std::sqrt(2 * kN) + 1e-12);
  // Bounds up to float32 rounding of the stored values.
  const double slack = 1e-6 * std::max(std::abs(a), std::abs(b));
  EXPECT_GE(s.min, a - slack);
  EXPECT_LE(s.max, b + slack);
  // The samples reach close to both ends.
  EXPECT_LT(s.min, a + (b - a) * 1e-4);
  EXPECT_GT(s.max, b - (b - a) * 1e-4);
}

void expect_normal(const Tensor& t, double mean, double sd) {
  Stats s = stats(t);
  EXPECT_NEAR(s.mean, mean, 5 * sd / std::sqrt(kN));
  EXPECT_NEAR(s.std, sd, 5 * sd / std::sqrt(2 * kN));
  // About 1 in 1.7e6 normal samples is beyond 5σ; beyond 6σ is essentially impossible.
  EXPECT_GT(s.min, mean - 6 * sd);
  EXPECT_LT(s.max, mean + 6 * sd);
}

}  // namespace

TEST(Init, UniformAndNormalMatchTheirDistributions) {
  Generator gen(1);
  Tensor t = empty({kRows, kCols});
  expect_uniform(init::uniform_(t, gen, -0.3, 0.7), -0.3, 0.7);
  expect_uniform(init::uniform_(t, gen), 0, 1);
  expect_normal(init::normal_(t, gen, 2.0, 0.5), 2.0, 0.5);
  expect_normal(init::normal_(t, gen), 0.0, 1.0);
}

TEST(Init, GainsAndFans) {
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::Linear), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::Sigmoid), 1.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::ReLU), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::Tanh), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(init::calculate_gain(init::Nonlinearity::LeakyReLU, 0.2), std::sqrt(2.0 / 1.04));
  EXPECT_EQ(init::fan_in_and_fan_out(empty({30, 20})), (std::pair<int64_t, int64_t>{20, 30}));
  // [out, in, kh, kw]: the receptive field multiplies both fans.
  EXPECT_EQ(init::fan_in_and_fan_out(empty({8, 4, 3, 5})), (std::pair<int64_t, int64_t>{60, 120}));
  expect_error([] { init::fan_in_and_fan_out(empty({7})); }, ErrorKind::Shape,
               {"[nn.init]", "at least 2 dims", "[7] (float32)"});
}

TEST(Init, XavierMatchesGlorotBounds) {
  Generator gen(2);
  const int64_t out = 500, in = 2000;  // fan_in + fan_out = 2500
  Tensor t = empty({out, in});
  const double a = 1.5 * std::sqrt(6.0 / 2500.0);
  expect_uniform(init::xavier_uniform_(t, gen, 1.5), -a, a);
  expect_normal(init::xavier_normal_(t, gen), 0.0, std::sqrt(2.0 / 2500.0));
}

TEST(Init, KaimingUsesFanInAndGain) {
  Generator gen(3);
  const int64_t out = 250, in = 4000;
  Tensor t = empty({out, in});
  const double relu_bound = std::sqrt(2.0) * std::sqrt(3.0 / in);
  expect_uniform(init::kaiming_uniform_(t, gen), -relu_bound, relu_bound);
  const double linear_bound = std::sqrt(3.0 / in);
  expect_uniform(init::kaiming_uniform_(t, gen, init::Nonlinearity::Linear), -linear_bound,
                 linear_bound);
  expect_normal(init::kaiming_normal_(t, gen), 0.0, std::sqrt(2.0 / in));
  expect_normal(init::kaiming_normal_(t, gen, init::Nonlinearity::LeakyReLU, 0.1), 0.0,
                std::sqrt(2.0 / 1.01) / std::sqrt(static_cast<double>(in)));
}

TEST(Init, SameSeedSameValuesAcrossDtypes) {
  Generator g1(42), g2(42), g3(43);
  Tensor a = init::normal_(empty({64, 32}), g1);
  Tensor b = init::normal_(empty({64, 32}), g2);
  Tensor c = init::normal_(empty({64, 32}), g3);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_NE(a.to_vector<float>(), c.to_vector<float>());
  // float64 from the same seed holds the same draws, before rounding to float32.
  Generator g4(42);
  Tensor d = init::normal_(empty({64, 32}, DType::Float64), g4);
  EXPECT_EQ(d.to(DType::Float32).to_vector<float>(), a.to_vector<float>());
}

TEST(Init, FillsInPlaceWithoutRecording) {
  Generator gen(5);
  Tensor w = zeros({16, 8}).requires_grad_(true);
  const uint64_t v0 = w.version();
  Tensor r = init::kaiming_uniform_(w, gen);
  EXPECT_TRUE(r.is_same(w));
  EXPECT_GT(w.version(), v0);
  EXPECT_TRUE(w.is_leaf());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_FALSE(w.grad_fn());
  EXPECT_NE(stats(w).std, 0.0);
  // A strided view fills only its own elements.
  Tensor base = zeros({4, 6});
  init::ones_(base.slice(1, 0, 6, 2));
  adjoint::testing::expect_values(base.sum({0}), {4, 0, 4, 0, 4, 0});
  init::normal_(base.t(), gen, 5.0, 0.0);
  adjoint::testing::expect_values(base.mean(), {5.0});
  init::zeros_(w);
  adjoint::testing::expect_values(w.abs().sum(), {0.0});
  init::constant_(w, 0.25);
  adjoint::testing::expect_values(w.mean(), {0.25});
}

TEST(Init, Errors) {
  Generator gen(6);
  expect_error([&] { init::normal_(zeros({3}, DType::Int64), gen); }, ErrorKind::DType,
               {"[nn.init.normal_]", "floating-point", "(int64)"});
  expect_error([&] { init::uniform_(empty({3}), gen, 1.0, 0.0); }, ErrorKind::Value,
               {"[nn.init.uniform_]", "a <= b"});
  expect_error([&] { init::normal_(empty({3}), gen, 0.0, -1.0); }, ErrorKind::Value,
               {"non-negative"});
  expect_error([&] { init::xavier_uniform_(empty({3}), gen); }, ErrorKind::Shape,
               {"at least 2 dims"});
  expect_error(
      [&] {
        init::kaiming_normal_(empty({3, 0}), gen);
      },
      ErrorKind::Shape, {"[nn.init.kaiming_normal_]", "fan_in is 0"});
}
