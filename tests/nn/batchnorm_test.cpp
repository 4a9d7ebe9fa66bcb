// nn::BatchNorm1d/2d and nn::GroupNorm: PyTorch's initialisation and buffers, training against
// the functional op and a loop of the running estimates (momentum, and momentum None as a
// cumulative average), evaluation, track_running_stats off, the state dict through a checkpoint
// file and back, dtype conversion, and errors naming the module.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/io.h"
#include "adjoint/nn.h"
#include "io/io_test_util.h"

using namespace adjoint;

namespace {

Tensor randn_t(const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, DType::Float32, &gen);
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  return (a.detach().to(DType::Float64) - b.detach().to(DType::Float64)).abs().max().item<double>();
}

std::vector<std::string> names(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> out;
  for (const auto& [n, t] : named) out.push_back(n);
  return out;
}

// Per-channel (mean, unbiased variance) of x [N, C, *] by a loop.
std::pair<std::vector<double>, std::vector<double>> loop_stats(const Tensor& x) {
  const std::vector<double> v = x.contiguous().to(DType::Float64).to_vector<double>();
  const int64_t n = x.size(0), c = x.size(1), s = x.numel() / (n * c);
  std::vector<double> m(c), var(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    double sum = 0, ss = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j) sum += v[(i * c + ch) * s + j];
    m[ch] = sum / (n * s);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < s; ++j)
        ss += (v[(i * c + ch) * s + j] - m[ch]) * (v[(i * c + ch) * s + j] - m[ch]);
    var[ch] = ss / (n * s - 1);
  }
  return {m, var};
}

void expect_throws_naming(const std::function<void()>& f, ErrorKind kind, const std::string& op,
                          const std::string& part = "") {
  try {
    f();
    ADD_FAILURE() << "expected an error from " << op;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find("[" + op + "]"), std::string::npos) << e.what();
    if (!part.empty()) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(BatchNormModule, InitialisesAsPyTorch) {
  nn::BatchNorm2d bn(3);
  EXPECT_EQ(names(bn.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(names(bn.named_buffers()),
            (std::vector<std::string>{"running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_EQ(bn.weight.to_vector<double>(), std::vector<double>(3, 1));
  EXPECT_EQ(bn.bias.to_vector<double>(), std::vector<double>(3, 0));
  EXPECT_EQ(bn.running_mean.to_vector<double>(), std::vector<double>(3, 0));
  EXPECT_EQ(bn.running_var.to_vector<double>(), std::vector<double>(3, 1));
  EXPECT_EQ(bn.num_batches_tracked.dtype(), DType::Int64);
  EXPECT_EQ(bn.num_batches_tracked.dim(), 0);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 0);
  EXPECT_TRUE(bn.weight.requires_grad());
  EXPECT_FALSE(bn.running_mean.requires_grad());
  nn::BatchNorm1d plain(4, 1e-5, 0.1, /*affine=*/false, /*track_running_stats=*/false);
  EXPECT_TRUE(plain.named_parameters().empty());
  EXPECT_TRUE(plain.named_buffers().empty());
  EXPECT_FALSE(plain.affine());
  EXPECT_FALSE(plain.track_running_stats());
}

TEST(BatchNormModule, TrainingTracksTheRunningEstimatesAsALoop) {
  nn::BatchNorm2d bn(2, 1e-5, 0.25);
  std::vector<double> lm(2, 0), lv(2, 1);
  for (int step = 0; step < 4; ++step) {
    Tensor x = randn_t({3, 2, 4, 5}, 1 + step) * (1 + step) + step;
    Tensor y = bn(x);
    EXPECT_LT(max_abs_diff(y, batch_norm(x, {}, {}, bn.weight, bn.bias, true)), 1e-6);
    const auto [m, v] = loop_stats(x);
    for (int ch = 0; ch < 2; ++ch) {
      lm[ch] = 0.75 * lm[ch] + 0.25 * m[ch];
      lv[ch] = 0.75 * lv[ch] + 0.25 * v[ch];
    }
  }
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 4);
  const std::vector<double> gm = bn.running_mean.to_vector<double>(),
                            gv = bn.running_var.to_vector<double>();
  for (int ch = 0; ch < 2; ++ch) {
    EXPECT_NEAR(gm[ch], lm[ch], 1e-5);
    EXPECT_NEAR(gv[ch], lv[ch], 1e-5 * lv[ch]);
  }
}

TEST(BatchNormModule, MomentumNoneIsACumulativeAverage) {
  nn::BatchNorm1d bn(3, 1e-5, std::nullopt);
  std::vector<double> sum_m(3, 0), sum_v(3, 0);
  const int steps = 5;
  for (int step = 0; step < steps; ++step) {
    Tensor x = randn_t({6, 3, 2}, 10 + step) * (2 + step) - step;
    bn(x);
    const auto [m, v] = loop_stats(x);
    for (int ch = 0; ch < 3; ++ch) sum_m[ch] += m[ch], sum_v[ch] += v[ch];
  }
  const std::vector<double> gm = bn.running_mean.to_vector<double>(),
                            gv = bn.running_var.to_vector<double>();
  for (int ch = 0; ch < 3; ++ch) {
    EXPECT_NEAR(gm[ch], sum_m[ch] / steps, 1e-5);
    EXPECT_NEAR(gv[ch], sum_v[ch] / steps, 1e-5 * gv[ch]);
  }
}

TEST(BatchNormModule, EvaluationUsesTheRunningEstimatesAndUpdatesNothing) {
  nn::BatchNorm1d bn(3);
  for (int step = 0; step < 3; ++step) bn(randn_t({8, 3}, 20 + step) * 3 + 1);
  bn.eval();
  const Tensor rm = bn.running_mean.clone(), rv = bn.running_var.clone();
  Tensor x = randn_t({2, 3, 4}, 30);
  Tensor y = bn(x);
  EXPECT_LT(max_abs_diff(y, batch_norm(x, rm, rv, bn.weight, bn.bias, false)), 1e-6);
  EXPECT_EQ(max_abs_diff(bn.running_mean, rm), 0);
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 3);
  // One value per channel is fine in evaluation, an error in training (as PyTorch).
  EXPECT_EQ(bn(randn_t({1, 3}, 31)).shape(), (Shape{1, 3}));
  bn.train();
  expect_throws_naming(
      [&] {
        bn(randn_t({1, 3}, 31));
      },
      ErrorKind::Value, "batch_norm", "more than 1 value per channel");
}

TEST(BatchNormModule, WithoutRunningEstimatesEvaluationUsesTheBatch) {
  nn::BatchNorm2d bn(2, 1e-5, 0.1, true, false);
  bn.eval();
  Tensor x = randn_t({3, 2, 2, 2}, 40);
  EXPECT_LT(max_abs_diff(bn(x), batch_norm(x, {}, {}, bn.weight, bn.bias, true)), 1e-6);
}

TEST(BatchNormModule, StateDictRoundTripsThroughACheckpoint) {
  io_test::TempDir dir;
  const std::string path = dir.file("bn.safetensors");
  nn::BatchNorm2d a(3);
  {
    NoGradGuard no_grad;
    a.weight.mul_(2);
  }
  for (int step = 0; step < 3; ++step) a(randn_t({4, 3, 2, 2}, 50 + step) + step);
  EXPECT_EQ(names(a.state_dict()),
            (std::vector<std::string>{"weight", "bias", "running_mean", "running_var",
                                      "num_batches_tracked"}));
  io::save_checkpoint(path, a.state_dict());
  nn::BatchNorm2d b(3);
  io::load_checkpoint(path, b.state_dict());
  const auto sa = a.state_dict(), sb = b.state_dict();
  for (std::size_t i = 0; i < sa.size(); ++i)
    EXPECT_EQ(max_abs_diff(sa[i].second, sb[i].second), 0) << sa[i].first;
  EXPECT_EQ(b.num_batches_tracked.item<int64_t>(), 3);
  a.eval();
  b.eval();
  Tensor x = randn_t({2, 3, 2, 2}, 60);
  EXPECT_EQ(max_abs_diff(a(x), b(x)), 0);
}

TEST(BatchNormModule, ToConvertsTheRunningEstimatesButNotTheCounter) {
  nn::BatchNorm1d bn(2);
  bn.to(DType::Float64);
  EXPECT_EQ(bn.running_mean.dtype(), DType::Float64);
  EXPECT_EQ(bn.running_var.dtype(), DType::Float64);
  EXPECT_EQ(bn.num_batches_tracked.dtype(), DType::Int64);
  Tensor y = bn(randn_t({4, 2}, 70).to(DType::Float64));
  EXPECT_EQ(y.dtype(), DType::Float64);
  bn.reset_running_stats();
  EXPECT_EQ(bn.num_batches_tracked.item<int64_t>(), 0);
  EXPECT_EQ(bn.running_var.to_vector<double>(), std::vector<double>(2, 1));
}

TEST(BatchNormModule, BadInputsAndArgumentsNameTheModule) {
  nn::BatchNorm2d bn2(3);
  expect_throws_naming(
      [&] {
        bn2(randn_t({2, 3, 4}, 1));
      },
      ErrorKind::Shape, "nn.BatchNorm2d", "expected 4D input");
  expect_throws_naming(
      [&] {
        bn2(randn_t({2, 4, 2, 2}, 1));
      },
      ErrorKind::Shape, "nn.BatchNorm2d", "3 channels");
  nn::BatchNorm1d bn1(3);
  expect_throws_naming(
      [&] {
        bn1(randn_t({2, 3, 4, 5}, 1));
      },
      ErrorKind::Shape, "nn.BatchNorm1d", "2D or 3D");
  expect_throws_naming([&] { nn::BatchNorm1d(0); }, ErrorKind::Value, "nn.BatchNorm1d");
  expect_throws_naming([&] { nn::BatchNorm2d(3, 1e-5, 1.5); }, ErrorKind::Value, "nn.BatchNorm2d",
                       "momentum");
}

TEST(GroupNormModule, InitialisesAsPyTorchAndMatchesTheFunction) {
  nn::GroupNorm gn(2, 6);
  EXPECT_EQ(names(gn.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_TRUE(gn.named_buffers().empty());
  EXPECT_EQ(gn.weight.to_vector<double>(), std::vector<double>(6, 1));
  EXPECT_EQ(gn.bias.to_vector<double>(), std::vector<double>(6, 0));
  Tensor x = randn_t({3, 6, 5}, 80);
  EXPECT_LT(max_abs_diff(gn(x), group_norm(x, 2)), 1e-6);
  gn.eval();
  EXPECT_LT(max_abs_diff(gn(x), group_norm(x, 2)), 1e-6);
  expect_throws_naming([] { nn::GroupNorm(4, 6); }, ErrorKind::Value, "nn.GroupNorm", "divisible");
  expect_throws_naming([&] { gn(randn_t({3, 4, 5}, 1)); }, ErrorKind::Shape, "nn.GroupNorm");
  nn::GroupNorm plain(3, 3, 1e-5, false);
  EXPECT_TRUE(plain.named_parameters().empty());
}
