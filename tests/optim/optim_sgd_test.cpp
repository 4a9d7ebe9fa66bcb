// optim::SGD against torch.optim.SGD's rule recomputed here in plain doubles: plain steps,
// momentum with dampening, Nesterov, weight decay, skipped parameters, in-place updates, and
// the errors for bad hyper-parameters and parameters.
#include <gtest/gtest.h>

#include "optim/optim_test_util.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::optim_test;
using adjoint::testing::expect_error;

namespace {

// torch.optim.SGD's update, written out for doubles.
struct SgdReference {
  optim::SGDOptions o;
  std::vector<double> buf;
  void step(std::vector<double>& p, const std::vector<double>& g) {
    const bool first = buf.empty();
    if (first) buf.resize(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + o.weight_decay * p[i];
      if (o.momentum != 0) {
        buf[i] = first ? d : o.momentum * buf[i] + (1 - o.dampening) * d;
        d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
      }
      p[i] -= o.lr * d;
    }
  }
};

void check_against_reference(const optim::SGDOptions& o, int steps = 3) {
  std::vector<double> ref = {0.5, -1.25, 2.0, 0.75};
  Tensor p = param(ref, Shape{2, 2});
  optim::SGD opt({p}, o);
  SgdReference r{o, {}};
  for (int s = 0; s < steps; ++s) {
    std::vector<double> g = test_grad(ref);
    set_grad(p, g);
    opt.step();
    r.step(ref, g);
    expect_near(p, ref);
  }
  EXPECT_EQ(opt.step_count(), steps);
}

}  // namespace

TEST(SGD, PlainStepsMatchTheFormula) { check_against_reference({.lr = 0.1}); }

TEST(SGD, MomentumStartsFromTheGradientThenDampens) {
  check_against_reference({.lr = 0.05, .momentum = 0.9});
  check_against_reference({.lr = 0.05, .momentum = 0.9, .dampening = 0.3});
}

TEST(SGD, Nesterov) { check_against_reference({.lr = 0.05, .momentum = 0.8, .nesterov = true}); }

TEST(SGD, WeightDecayIsAddedToTheGradient) {
  check_against_reference({.lr = 0.1, .weight_decay = 0.01});
  check_against_reference({.lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 0.05});
  check_against_reference({.lr = 0.1, .momentum = 0.5, .dampening = 0.5, .weight_decay = 0.2});
}

TEST(SGD, FirstMomentumStepIgnoresDampening) {
  // b = g on the first step even with dampening 0.5, so the first update is lr * g.
  Tensor p = param({1.0});
  optim::SGD opt({p}, {.lr = 0.5, .momentum = 0.9, .dampening = 0.5});
  set_grad(p, {2.0});
  opt.step();
  expect_near(p, {1.0 - 0.5 * 2.0});
  set_grad(p, {2.0});
  opt.step();  // b = 0.9 * 2 + 0.5 * 2 = 2.8
  expect_near(p, {0.0 - 0.5 * 2.8});
}

TEST(SGD, UpdatesThroughBackward) {
  // loss = sum(w * x) + 0.5 * sum(w^2): dloss/dw = x + w.
  Tensor w = param({1.0, -2.0, 0.5});
  Tensor x = tensor({0.3, 0.1, -0.7}, DType::Float64);
  optim::SGD opt({w}, {.lr = 0.1});
  (sum(w * x) + 0.5 * sum(w * w)).backward();
  opt.step();
  expect_near(w, {1.0 - 0.1 * (0.3 + 1.0), -2.0 - 0.1 * (0.1 - 2.0), 0.5 - 0.1 * (-0.7 + 0.5)});
}

TEST(SGD, UpdatesInPlaceAndLeavesTheGradient) {
  Tensor p = param({1.0, 2.0});
  const void* data = p.raw_data();
  const uint64_t version = p.version();
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .nesterov = true, .weight_decay = 0.1});
  set_grad(p, {0.5, -0.5});
  Tensor g = p.grad();
  opt.step();
  EXPECT_EQ(p.raw_data(), data);  // same storage: modules holding p see the update
  EXPECT_GT(p.version(), version);
  EXPECT_TRUE(p.grad().is_same(g));
  expect_near(g, {0.5, -0.5}, 0);  // weight decay and Nesterov work on a copy
  EXPECT_TRUE(p.requires_grad());
  EXPECT_TRUE(p.is_leaf());
  EXPECT_EQ(p.grad_fn(), nullptr);
}

TEST(SGD, ParametersWithoutGradientAreSkipped) {
  Tensor a = param({1.0}), b = param({2.0});
  optim::SGD opt({a, b}, {.lr = 0.1, .momentum = 0.9});
  set_grad(a, {1.0});
  opt.step();
  expect_near(a, {0.9});
  expect_near(b, {2.0}, 0);
  for (const auto& [name, t] : opt.state_dict()) EXPECT_NE(name, "state.1.momentum_buffer");
  // b's first gradient starts its own buffer: b = g.
  set_grad(b, {1.0});
  a.zero_grad();
  opt.step();
  expect_near(a, {0.9});
  expect_near(b, {1.9});
}

TEST(SGD, ZeroGrad) {
  Tensor a = param({1.0, 2.0});
  optim::SGD opt({a}, {.lr = 0.1});
  set_grad(a, {1.0, 1.0});
  opt.zero_grad(false);
  expect_near(a.grad(), {0, 0}, 0);
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(SGD, LearningRateGetSet) {
  Tensor a = param({1.0});
  optim::SGD opt({a}, {.lr = 0.1});
  EXPECT_EQ(opt.lr(), 0.1);
  opt.set_lr(0.5);
  EXPECT_EQ(opt.lr(), 0.5);
  EXPECT_EQ(opt.options().lr, 0.5);
  set_grad(a, {1.0});
  opt.step();
  expect_near(a, {0.5});
  expect_error([&] { opt.set_lr(-1); }, ErrorKind::Value, {"[optim.SGD]", "learning rate", "-1"});
}

TEST(SGD, BadHyperParametersNameTheOptimizer) {
  Tensor p = param({1.0});
  expect_error([&] { optim::SGD({p}, {.lr = -0.1}); }, ErrorKind::Value,
               {"[optim.SGD]", "learning rate", "-0.1"});
  expect_error([&] { optim::SGD({p}, {.lr = NAN}); }, ErrorKind::Value,
               {"[optim.SGD]", "learning rate"});
  expect_error([&] { optim::SGD({p}, {.momentum = -0.5}); }, ErrorKind::Value,
               {"[optim.SGD]", "momentum", "-0.5"});
  expect_error([&] { optim::SGD({p}, {.weight_decay = -1}); }, ErrorKind::Value,
               {"[optim.SGD]", "weight_decay"});
  expect_error([&] { optim::SGD({p}, {.nesterov = true}); }, ErrorKind::Value,
               {"[optim.SGD]", "nesterov", "momentum 0"});
  expect_error([&] { optim::SGD({p}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}); },
               ErrorKind::Value, {"[optim.SGD]", "nesterov", "dampening 0.1"});
}

TEST(SGD, BadParameterLists) {
  expect_error([] { optim::SGD({}, {}); }, ErrorKind::Value, {"[optim.SGD]", "empty"});
  Tensor p = param({1.0});
  expect_error(
      [&] {
        optim::SGD({p, Tensor()}, {});
      },
      ErrorKind::Value, {"[optim.SGD]", "parameter 1", "undefined"});
  expect_error(
      [&] {
        optim::SGD({p, p}, {});
      },
      ErrorKind::Value, {"[optim.SGD]", "more than once"});
  Tensor no_grad = tensor({1.0}, DType::Float64);
  expect_error([&] { optim::SGD({no_grad}, {}); }, ErrorKind::Value,
               {"[optim.SGD]", "requires grad"});
  Tensor non_leaf = p * 2;
  expect_error([&] { optim::SGD({non_leaf}, {}); }, ErrorKind::Value, {"[optim.SGD]", "leaf"});
  expect_error([&] { optim::SGD({tensor(std::vector<int64_t>{1})}, {}); }, ErrorKind::DType,
               {"[optim.SGD]", "floating-point"});
}
