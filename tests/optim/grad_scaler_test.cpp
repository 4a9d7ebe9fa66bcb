// GradScaler: the scale's state machine on scripted sequences with injected Inf/NaN (skipped
// steps, backoff, growth after the interval), true gradients after unscale_ (the oracle: the
// unscaled backward), clipping after unscale_, accumulation, save/resume, misuse, and the
// float16 underflow story: gradients that vanish without scaling and survive with it.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "adjoint/adjoint.h"
#include "adjoint/optim.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;
using optim::GradScaler;
using optim::GradScalerOptions;

namespace {

// Bitwise equality through float64.
void expect_same(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  std::vector<double> g = got.to(DType::Float64).to_vector<double>();
  std::vector<double> w = want.to(DType::Float64).to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], w[i]) << "element " << i;
}

Tensor quadratic_loss(const Tensor& p) { return sum(square(p - 0.5)); }

TEST(GradScaler, DefaultsArePyTorchs) {
  GradScaler s;
  EXPECT_EQ(s.get_scale(), 65536.0);
  EXPECT_TRUE(s.is_enabled());
  optim::StateDict d = s.state_dict();
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(d[1].second.item<double>(), 2.0);    // growth_factor
  EXPECT_EQ(d[2].second.item<double>(), 0.5);    // backoff_factor
  EXPECT_EQ(d[3].second.item<int64_t>(), 2000);  // growth_interval
}

// The scale after each update() of a scripted run: every step whose gradient holds an Inf or
// NaN is skipped (the parameter keeps its value) and halves the scale; every growth_interval
// finite steps in a row double it. The oracle replays those two rules in plain arithmetic.
TEST(GradScaler, ScriptedInfAndNaNStepsSkipBackOffAndGrowAfterTheInterval) {
  const double poison[] = {0, 0, INFINITY, 0, NAN, 0, 0, 0, -INFINITY, 0, 0};
  GradScaler scaler({.init_scale = 8.0, .growth_interval = 2});
  Tensor p = tensor({1.0, -2.0}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  double want_scale = 8.0;
  int64_t good_in_a_row = 0;
  for (double bad : poison) {
    opt.zero_grad();
    scaler.scale(quadratic_loss(p) + bad * sum(p)).backward();
    const std::vector<double> before = p.to_vector<double>();
    const bool stepped = scaler.step(opt);
    const bool finite = bad == 0;
    EXPECT_EQ(stepped, finite);
    EXPECT_EQ(scaler.found_inf(opt), !finite);
    if (!finite)
      EXPECT_EQ(p.to_vector<double>(), before) << "a skipped step changed p";
    else
      EXPECT_NE(p.to_vector<double>(), before);
    scaler.update();
    if (!finite) {
      want_scale *= 0.5;
      good_in_a_row = 0;
    } else if (++good_in_a_row == 2) {
      want_scale *= 2;
      good_in_a_row = 0;
    }
    EXPECT_EQ(scaler.get_scale(), want_scale);
    EXPECT_EQ(scaler.growth_tracker(), good_in_a_row);
  }
  EXPECT_EQ(opt.step_count(), 8);  // 11 iterations, 3 skipped
}

TEST(GradScaler, UnscaledGradientsAreTheTrueOnesAndClippingSeesThem) {
  Generator g(3);
  Tensor w = randn({4, 3}, DType::Float32, &g).requires_grad_();
  Tensor x = randn({5, 4}, DType::Float32, &g);
  auto loss = [&] { return sum(tanh(matmul(x, w))); };
  loss().backward();
  Tensor true_grad = w.grad().clone();
  w.zero_grad();

  GradScaler scaler;  // 2^16: scaling and unscaling by a power of two is exact
  optim::SGD opt({w}, {.lr = 0.0});
  scaler.scale(loss()).backward();
  EXPECT_GT(max(abs(w.grad())).item<float>(), 1000.0f);  // scaled
  scaler.unscale_(opt);
  expect_same(w.grad(), true_grad);

  // Clipping after unscale_ clips the true gradients: the same as clipping them directly.
  const double norm = optim::clip_grad_norm_({w}, 0.1);
  EXPECT_NEAR(norm, std::sqrt(sum(square(true_grad)).item<float>()), 1e-5 * norm);
  EXPECT_NEAR(std::sqrt(sum(square(w.grad())).item<float>()), 0.1, 1e-6);
  EXPECT_TRUE(scaler.step(opt));  // does not unscale again
  scaler.update();
}

TEST(GradScaler, AccumulatedMicroBatchesAreUnscaledOnce) {
  Tensor p = tensor({0.25, 3.0, -1.5}).requires_grad_();
  Tensor q = p.detach().clone().requires_grad_();
  const std::vector<double> coefs{1.0, -0.5, 2.0};
  for (double c : coefs) (c * quadratic_loss(q)).backward();  // the oracle, unscaled

  GradScaler scaler({.init_scale = 1024.0});
  optim::SGD opt({p}, {.lr = 0.0});
  for (double c : coefs) scaler.scale(c * quadratic_loss(p)).backward();
  scaler.unscale_(opt);
  expect_same(p.grad(), q.grad());
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

// Training with the scaler (including skipped steps), saved mid-way and resumed into fresh
// objects: the resumed run continues bit-identically.
TEST(GradScaler, SaveAndResumeContinueExactly) {
  const GradScalerOptions options{.init_scale = 256.0, .growth_interval = 3};
  auto run = [&](Tensor& p, optim::Adam& opt, GradScaler& scaler, int from, int to) {
    for (int i = from; i < to; ++i) {
      opt.zero_grad();
      const double bad = i % 5 == 4 ? INFINITY : 0.0;
      scaler.scale(quadratic_loss(p) * (1.0 + 0.1 * i) + bad * sum(p)).backward();
      scaler.step(opt);
      scaler.update();
    }
  };
  Tensor p = tensor({1.0, -1.0, 2.0}).requires_grad_();
  optim::Adam opt({p}, {.lr = 0.05});
  GradScaler scaler(options);
  run(p, opt, scaler, 0, 7);
  const optim::StateDict scaler_state = scaler.state_dict(), opt_state = opt.state_dict();
  const Tensor p_saved = p.detach().clone();
  run(p, opt, scaler, 7, 15);

  Tensor p2 = p_saved.clone().requires_grad_();
  optim::Adam opt2({p2}, {.lr = 0.05});
  GradScaler scaler2;  // default options: all of them come from the state
  opt2.load_state_dict(opt_state);
  scaler2.load_state_dict(scaler_state);
  run(p2, opt2, scaler2, 7, 15);
  expect_same(p2, p);
  EXPECT_EQ(scaler2.get_scale(), scaler.get_scale());
  EXPECT_EQ(scaler2.growth_tracker(), scaler.growth_tracker());
}

TEST(GradScaler, MisuseIsRefusedWithTheReason) {
  Tensor p = tensor({1.0}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.1});
  GradScaler scaler;
  scaler.scale(quadratic_loss(p)).backward();
  scaler.unscale_(opt);
  expect_error([&] { scaler.unscale_(opt); }, ErrorKind::Value,
               {"optim.GradScaler", "unscale_() has already been called"});
  scaler.step(opt);
  expect_error([&] { scaler.step(opt); }, ErrorKind::Value, {"optim.GradScaler", "step()"});
  expect_error([&] { scaler.unscale_(opt); }, ErrorKind::Value, {"after step()"});
  scaler.update();
  expect_error([&] { scaler.update(); }, ErrorKind::Value, {"optim.GradScaler", "update"});
  expect_error([] { GradScaler s({.growth_factor = 0.5}); }, ErrorKind::Value, {"growth_factor"});
  expect_error([] { GradScaler s({.backoff_factor = 1.0}); }, ErrorKind::Value, {"backoff_factor"});
  expect_error([] { GradScaler s({.init_scale = -1}); }, ErrorKind::Value, {"init_scale"});
  expect_error([&] { scaler.scale(ones({1}, DType::Int64)); }, ErrorKind::DType,
               {"optim.GradScaler", "int64"});
  // A bad state changes nothing.
  optim::StateDict bad = scaler.state_dict();
  bad[4].second = full({}, 5000.0, DType::Int64);  // growth_tracker past the interval
  const double before = scaler.get_scale();
  expect_error([&] { scaler.load_state_dict(bad); }, ErrorKind::Value, {"growth_tracker"});
  bad.pop_back();
  expect_error([&] { scaler.load_state_dict(bad); }, ErrorKind::Value,
               {"growth_tracker", "missing"});
  EXPECT_EQ(scaler.get_scale(), before);
}

TEST(GradScaler, AFloat16LossIsScaledInFloat32AndTheFirstStepBacksOff) {
  // 5 * 2^16 = 327680 overflows float16 (65504); PyTorch's 0-d float32 scale promotes, so the
  // scaled loss is finite. Its gradient reaches the float16 loss as 2^16, which float16 cannot
  // hold either: the first step overflows and is skipped, and at 2^15 the gradient,
  // 2^15 / 1024 = 32 per element, fits. (Under Autocast the losses are float32.)
  Tensor p = full({1024}, 1.0, DType::Float16).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.0});
  GradScaler scaler;
  for (int k = 0; k < 2; ++k) {
    opt.zero_grad();
    Tensor loss = mean(p) + 4.0;  // 5
    ASSERT_EQ(loss.dtype(), DType::Float16);
    Tensor scaled = scaler.scale(loss);
    EXPECT_EQ(scaled.dtype(), DType::Float32);
    EXPECT_EQ(scaled.item<float>(), 5.0f * static_cast<float>(scaler.get_scale()));
    scaled.backward();
    ASSERT_EQ(p.grad().dtype(), DType::Float16);
    if (k == 0) {
      EXPECT_TRUE(std::isinf(p.grad().to(DType::Float64).max().item<double>()));
      EXPECT_FALSE(scaler.step(opt));
    } else {
      EXPECT_EQ(p.grad().to(DType::Float64).max().item<double>(), 32.0);
      EXPECT_EQ(p.grad().to(DType::Float64).min().item<double>(), 32.0);
      EXPECT_TRUE(scaler.step(opt));
    }
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 32768.0);
  }
}

TEST(GradScaler, DisabledPassesEverythingThrough) {
  Tensor p = tensor({1.0, 2.0}).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.5});
  GradScaler scaler({.enabled = false});
  Tensor loss = quadratic_loss(p);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  loss.backward();
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_EQ(p.to_vector<double>(), (std::vector<double>{0.5, 0.5}));  // p - 0.5 * 2 (p - 0.5)
}

// The underflow story. A deep narrow network with small weights trained under float16
// autocast: the gradient reaching the first layers is far below float16's smallest subnormal
// (about 6e-8), so without scaling the backward pass rounds it to zero. With the scaler's 2^16
// it stays in range, and after unscaling it matches float32's gradient.
TEST(GradScaler, Float16GradientsThatUnderflowSurviveScaling) {
  const int depth = 8, width = 16;
  Generator g(11);
  std::vector<Tensor> ws;
  for (int i = 0; i < depth; ++i)
    ws.push_back((randn({width, width}, DType::Float32, &g) * 0.15).requires_grad_());
  Tensor x = randn({4, width}, DType::Float32, &g);
  auto loss_of = [&] {
    Tensor h = x;
    for (const Tensor& w : ws) h = tanh(matmul(h, w));
    return sum(h) * 1e-7;
  };
  auto zero_fraction = [&] {
    const Tensor gr = ws[0].grad();
    return sum(eq(gr, 0.0).to(DType::Float64)).item<double>() / static_cast<double>(gr.numel());
  };
  auto reset = [&] {
    for (Tensor& w : ws) w.zero_grad();
  };

  loss_of().backward();  // float32: the reference
  const Tensor exact = ws[0].grad().clone();
  ASSERT_EQ(zero_fraction(), 0.0);
  reset();

  Tensor loss;
  {
    Autocast amp(DType::Float16);
    loss = loss_of();
  }
  loss.backward();
  const double unscaled_zeros = zero_fraction();
  std::cout << "zero gradients in the first layer, float16 without scaling: " << unscaled_zeros
            << "\n";
  reset();

  GradScaler scaler;
  optim::SGD opt(ws, {.lr = 0.0});
  {
    Autocast amp(DType::Float16);
    loss = loss_of();
  }
  scaler.scale(loss).backward();
  scaler.unscale_(opt);
  const double scaled_zeros = zero_fraction();
  std::cout << "with the GradScaler: " << scaled_zeros << "\n";
  EXPECT_GT(unscaled_zeros, 0.5) << "the example should underflow without scaling";
  EXPECT_LT(scaled_zeros, 0.02) << "with scaling";
  EXPECT_FALSE(scaler.found_inf(opt));
  // float16 keeps 11 significant bits; a few roundings per layer.
  const double err = max(abs(ws[0].grad() - exact)).item<float>();
  EXPECT_LT(err, 0.05 * max(abs(exact)).item<float>());
}

}  // namespace
