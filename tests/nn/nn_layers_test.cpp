// Tests for the basic layers: Linear (against x Wᵀ + b computed with loops, libtorch's init
// bounds, gradients, the error naming the layer), Embedding, LayerNorm (against a loop
// oracle), Dropout in train and eval mode, and the activation modules against std:: math.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::error_message;
using adjoint::testing::expect_error;

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "at " << i;
}

}  // namespace

TEST(Linear, EqualsXWTransposedPlusB) {
  Generator gen(7);
  nn::Linear fc(5, 3, true, &gen);
  fc.to(DType::Float64);
  EXPECT_EQ(fc.weight.shape(), (Shape{3, 5}));
  EXPECT_EQ(fc.bias.shape(), (Shape{3}));
  Tensor x = randn({2, 4, 5}, DType::Float64, &gen);  // leading dims are batch dims
  Tensor y = fc(x);
  ASSERT_EQ(y.shape(), (Shape{2, 4, 3}));
  const std::vector<double> xv = values(x), w = values(fc.weight), b = values(fc.bias);
  std::vector<double> want(2 * 4 * 3);
  for (int r = 0; r < 8; ++r)
    for (int o = 0; o < 3; ++o) {
      double acc = b[o];
      for (int i = 0; i < 5; ++i) acc += xv[r * 5 + i] * w[o * 5 + i];
      want[r * 3 + o] = acc;
    }
  expect_near_all(values(y), want, 1e-14);

  // Gradients: dL/dW = Σ_rows gᵀ x and dL/db = Σ_rows g for L = sum(y * g).
  Tensor g = randn({2, 4, 3}, DType::Float64, &gen);
  (y * g).sum().backward();
  const std::vector<double> gv = values(g);
  std::vector<double> dw(15, 0), db(3, 0);
  for (int r = 0; r < 8; ++r)
    for (int o = 0; o < 3; ++o) {
      db[o] += gv[r * 3 + o];
      for (int i = 0; i < 5; ++i) dw[o * 5 + i] += gv[r * 3 + o] * xv[r * 5 + i];
    }
  expect_near_all(values(fc.weight.grad()), dw, 1e-13);
  expect_near_all(values(fc.bias.grad()), db, 1e-13);
}

TEST(Linear, WithoutBias) {
  Generator gen(8);
  nn::Linear fc(4, 2, false, &gen);
  EXPECT_FALSE(fc.bias.defined());
  EXPECT_EQ(fc.named_parameters().size(), 1u);
  Tensor x = randn({3, 4}, {}, &gen);
  adjoint::testing::expect_values(fc(x), values(matmul(x, fc.weight.t())), 1e-6);
}

TEST(Linear, LibtorchDefaultInitBounds) {
  Generator gen(9);
  const int64_t in = 400, out = 300;
  nn::Linear fc(in, out, true, &gen);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  for (const Tensor& p : {fc.weight, fc.bias}) {
    std::vector<double> v = values(p);
    double mean = 0, sq = 0;
    for (double x : v) {
      EXPECT_LE(std::abs(x), bound * (1 + 1e-6));
      mean += x;
      sq += x * x;
    }
    mean /= static_cast<double>(v.size());
    const double sd = std::sqrt(sq / static_cast<double>(v.size()) - mean * mean);
    const double n = static_cast<double>(v.size());
    EXPECT_NEAR(mean, 0.0, 5 * bound / std::sqrt(3 * n));
    EXPECT_NEAR(sd, bound / std::sqrt(3.0), 5 * bound / std::sqrt(3 * n) + 0.03 * bound);
  }
  // The same seed builds the same layer.
  Generator g1(10), g2(10);
  nn::Linear a(6, 5, true, &g1), b(6, 5, true, &g2);
  EXPECT_EQ(a.weight.to_vector<float>(), b.weight.to_vector<float>());
  EXPECT_EQ(a.bias.to_vector<float>(), b.bias.to_vector<float>());
}

TEST(Linear, WrongFeatureCountNamesTheLayer) {
  nn::Linear fc(8, 4);
  const std::string msg = error_message([&] { fc(zeros({2, 7})); }, ErrorKind::Shape);
  EXPECT_EQ(msg, "[nn.Linear] input has 7 features, expected 8: [2, 7] (float32)");
  expect_error([&] { fc(zeros({})); }, ErrorKind::Shape, {"[nn.Linear]", "at least 1 dim"});
}

TEST(Embedding, LooksUpRowsAndSumsRepeatedGradients) {
  Generator gen(11);
  nn::Embedding emb(6, 3, &gen);
  Tensor idx = tensor(std::vector<int64_t>{4, 0, 4, 5}, Shape{2, 2});
  Tensor y = emb(idx);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 3}));
  const std::vector<double> w = values(emb.weight), yv = values(y);
  const int64_t ids[] = {4, 0, 4, 5};
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(yv[r * 3 + c], w[ids[r] * 3 + c]);
  y.sum().backward();
  adjoint::testing::expect_values(emb.weight.grad().sum({1}), {3, 0, 0, 0, 6, 3});
  expect_error(
      [&] {
        emb(tensor({1.0, 2.0}));
      },
      ErrorKind::DType, {"[nn.Embedding]", "int64", "(float32)"});
  expect_error([&] { emb(tensor(std::vector<int64_t>{6})); }, ErrorKind::Index, {});
}

TEST(Embedding, DefaultAndGivenInitStd) {
  Generator gen(12);
  nn::Embedding unit(500, 200, &gen);
  nn::Embedding small(500, 200, &gen, 0.02);
  auto sd = [](const Tensor& t) { return std::sqrt(values(t.square().mean())[0]); };
  EXPECT_NEAR(sd(unit.weight), 1.0, 0.01);
  EXPECT_NEAR(sd(small.weight), 0.02, 0.0002);
}

TEST(LayerNorm, MatchesLoopOracle) {
  Generator gen(13);
  nn::LayerNorm ln(6);
  ln.to(DType::Float64);
  adjoint::testing::expect_values(ln.weight, std::vector<double>(6, 1.0), 0);
  adjoint::testing::expect_values(ln.bias, std::vector<double>(6, 0.0), 0);
  {
    NoGradGuard no_grad;  // non-trivial affine parameters
    ln.weight.copy_(randn({6}, DType::Float64, &gen));
    ln.bias.copy_(randn({6}, DType::Float64, &gen));
  }
  Tensor x = randn({2, 3, 6}, DType::Float64, &gen) * 3 + 1;
  const std::vector<double> xv = values(x), w = values(ln.weight), b = values(ln.bias);
  std::vector<double> want(xv.size());
  for (int r = 0; r < 6; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < 6; ++i) mean += xv[r * 6 + i] / 6;
    for (int i = 0; i < 6; ++i) var += (xv[r * 6 + i] - mean) * (xv[r * 6 + i] - mean) / 6;
    for (int i = 0; i < 6; ++i)
      want[r * 6 + i] = (xv[r * 6 + i] - mean) / std::sqrt(var + 1e-5) * w[i] + b[i];
  }
  expect_near_all(values(ln(x)), want, 1e-12);
}

TEST(LayerNorm, WithoutAffineAndShapeErrors) {
  nn::LayerNorm plain(Shape{2, 3}, 1e-6, false);
  EXPECT_TRUE(plain.parameters().empty());
  Tensor y = plain(arange(0, 12, 1, DType::Float64).reshape({2, 2, 3}));
  // Each [2, 3] block normalises to mean 0 and (biased) variance 1.
  std::vector<double> v = values(y);
  for (int blk = 0; blk < 2; ++blk) {
    double mean = 0, var = 0;
    for (int i = 0; i < 6; ++i) mean += v[blk * 6 + i] / 6;
    for (int i = 0; i < 6; ++i) var += v[blk * 6 + i] * v[blk * 6 + i] / 6;
    EXPECT_NEAR(mean, 0, 1e-12);
    EXPECT_NEAR(var, 1, 1e-5);
  }
  nn::LayerNorm ln(8);
  expect_error(
      [&] {
        ln(zeros({2, 7}));
      },
      ErrorKind::Shape, {"[nn.LayerNorm]", "[2, 7] (float32)", "normalized shape [8]"});
}

TEST(Dropout, TrainZeroesAboutPAndRescalesEvalIsIdentity) {
  const double p = 0.3;
  Generator seed(14);
  nn::Dropout drop(p, &seed);
  Tensor x = rand({200, 500}, DType::Float64) + 1;  // all nonzero
  Tensor y = drop(x);
  const std::vector<double> xv = values(x), yv = values(y);
  int64_t zeros_count = 0;
  for (std::size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] == 0) {
      ++zeros_count;
    } else {
      EXPECT_NEAR(yv[i], xv[i] / (1 - p), 1e-12);
    }
  }
  const double n = static_cast<double>(xv.size());
  // Binomial(n, p): 5 standard deviations.
  EXPECT_NEAR(zeros_count / n, p, 5 * std::sqrt(p * (1 - p) / n));
  // Gradient flows through the kept elements only, with the same scale.
  Tensor xl = x.detach().requires_grad_(true);
  Tensor yl = drop(xl);
  yl.sum().backward();
  const std::vector<double> g = values(xl.grad()), yl_v = values(yl);
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], yl_v[i] == 0 ? 0.0 : 1 / (1 - p));

  drop.eval();
  EXPECT_TRUE(drop(x).is_same(x));
  drop.train();
  EXPECT_FALSE(drop(x).is_same(x));
  // p = 0 is the identity even in training mode.
  nn::Dropout none(0.0);
  EXPECT_TRUE(none(x).is_same(x));
  expect_error([] { nn::Dropout(1.5); }, ErrorKind::Value, {"[nn.Dropout]", "[0, 1]"});
}

TEST(Dropout, SameSeedSameMask) {
  Generator s1(15), s2(15);
  nn::Dropout a(0.5, &s1), b(0.5, &s2);
  Tensor x = ones({1000});
  EXPECT_EQ(a(x).to_vector<float>(), b(x).to_vector<float>());
  EXPECT_NE(a(x).to_vector<float>(), a(x).to_vector<float>());  // the stream moves on
}

TEST(Activations, MatchStdMath) {
  Tensor x = linspace(-4, 4, 33, DType::Float64);
  const std::vector<double> xv = values(x);
  auto check = [&](nn::Module& m, double (*f)(double), double tol) {
    const std::vector<double> y = values(m(x));
    for (std::size_t i = 0; i < xv.size(); ++i)
      EXPECT_NEAR(y[i], f(xv[i]), tol) << m.type_name() << " at " << xv[i];
  };
  nn::ReLU relu_m;
  check(
      relu_m, [](double v) { return v > 0 ? v : 0.0; }, 0);
  nn::Tanh tanh_m;
  check(
      tanh_m, [](double v) { return std::tanh(v); }, 1e-14);
  nn::Sigmoid sigmoid_m;
  check(
      sigmoid_m, [](double v) { return 1 / (1 + std::exp(-v)); }, 1e-14);
  nn::SiLU silu_m;
  check(
      silu_m, [](double v) { return v / (1 + std::exp(-v)); }, 1e-13);
  nn::GELU gelu_erf;
  check(
      gelu_erf, [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }, 1e-13);
  nn::GELU gelu_tanh(GeluApproximation::Tanh);
  check(
      gelu_tanh,
      [](double v) {
        return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      },
      1e-13);
  EXPECT_EQ(nn::make_activation(nn::Activation::GELUTanh)->type_name(), "GELU");
  EXPECT_EQ(nn::make_activation(nn::Activation::SiLU)->type_name(), "SiLU");
}
