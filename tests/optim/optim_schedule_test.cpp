// Learning-rate schedules: values at chosen steps recomputed from the formulas, the Scheduler
// driving an optimizer (and picking up where a restored optimizer left off), and bad arguments.
#include <gtest/gtest.h>

#include <numbers>

#include "optim/optim_test_util.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::optim_test;
using adjoint::testing::expect_error;

TEST(Schedule, Constant) {
  EXPECT_EQ(optim::constant_lr(0, 0.1), 0.1);
  EXPECT_EQ(optim::constant_lr(12345, 0.1), 0.1);
  EXPECT_EQ(optim::constant_schedule(0.3)(7), 0.3);
}

TEST(Schedule, LinearWarmup) {
  const double lr = 0.4;
  EXPECT_DOUBLE_EQ(optim::linear_warmup_lr(0, lr, 4), lr * 1 / 4);
  EXPECT_DOUBLE_EQ(optim::linear_warmup_lr(2, lr, 4), lr * 3 / 4);
  EXPECT_DOUBLE_EQ(optim::linear_warmup_lr(3, lr, 4), lr);
  EXPECT_DOUBLE_EQ(optim::linear_warmup_lr(4, lr, 4), lr);
  EXPECT_DOUBLE_EQ(optim::linear_warmup_lr(100, lr, 4), lr);
  EXPECT_DOUBLE_EQ(optim::linear_warmup_lr(0, lr, 0), lr);  // no warmup
  auto s = optim::linear_warmup_schedule(lr, 10);
  for (int64_t t = 0; t < 20; ++t)
    EXPECT_DOUBLE_EQ(s(t), t < 10 ? lr * static_cast<double>(t + 1) / 10 : lr);
}

TEST(Schedule, CosineWithWarmupAndFloor) {
  const double lr = 1.0, min_lr = 0.1;
  const int64_t total = 110, warmup = 10;
  auto expected = [&](int64_t t) {
    if (t < warmup) return lr * static_cast<double>(t + 1) / warmup;
    if (t >= total) return min_lr;
    const double progress = static_cast<double>(t - warmup) / (total - warmup);
    return min_lr + (lr - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
  };
  for (int64_t t : {0, 4, 9, 10, 35, 60, 85, 109, 110, 500})
    EXPECT_NEAR(optim::cosine_lr(t, lr, total, warmup, min_lr), expected(t), 1e-15) << t;
  EXPECT_DOUBLE_EQ(optim::cosine_lr(10, lr, total, warmup, min_lr), lr);  // peak after warmup
  EXPECT_NEAR(optim::cosine_lr(60, lr, total, warmup, min_lr), (lr + min_lr) / 2, 1e-15);  // middle
  EXPECT_DOUBLE_EQ(optim::cosine_lr(110, lr, total, warmup, min_lr), min_lr);
  auto s = optim::cosine_schedule(lr, total, warmup, min_lr);
  for (int64_t t = warmup; t < total; ++t) EXPECT_GT(s(t), s(t + 1)) << t;  // decreasing
}

TEST(Schedule, CosineWithoutWarmup) {
  EXPECT_DOUBLE_EQ(optim::cosine_lr(0, 0.5, 100), 0.5);
  EXPECT_NEAR(optim::cosine_lr(25, 0.5, 100), 0.25 * (1 + std::cos(std::numbers::pi / 4)), 1e-15);
  EXPECT_NEAR(optim::cosine_lr(100, 0.5, 100), 0.0, 0);
}

TEST(Schedule, BadArguments) {
  expect_error([] { optim::cosine_schedule(0.1, 10, 10); }, ErrorKind::Value,
               {"[optim.schedule]", "total_steps > warmup_steps"});
  expect_error([] { optim::cosine_schedule(0.1, 100, 0, 0.2); }, ErrorKind::Value,
               {"[optim.schedule]", "min_lr"});
  expect_error([] { optim::linear_warmup_schedule(0.1, -1); }, ErrorKind::Value,
               {"[optim.schedule]", "warmup_steps"});
  expect_error([] { optim::constant_schedule(-0.1); }, ErrorKind::Value,
               {"[optim.schedule]", "lr"});
  expect_error([] { optim::constant_lr(-1, 0.1); }, ErrorKind::Value, {"[optim.schedule]", "step"});
}

TEST(Scheduler, SetsTheLearningRateOfEachStep) {
  Tensor p = param({0.0});
  optim::SGD opt({p}, {.lr = 123});
  auto schedule = optim::linear_warmup_schedule(1.0, 4);
  optim::Scheduler sched(opt, schedule);
  EXPECT_DOUBLE_EQ(opt.lr(), 0.25);  // set for the first step already
  double expected_p = 0;
  for (int64_t t = 0; t < 6; ++t) {
    EXPECT_DOUBLE_EQ(opt.lr(), schedule(t));
    set_grad(p, {-1.0});
    opt.step();
    expected_p += schedule(t);  // p -= lr * (-1)
    EXPECT_DOUBLE_EQ(sched.step(), schedule(t + 1));
  }
  expect_near(p, {expected_p});
}

TEST(Scheduler, FollowsARestoredOptimizer) {
  Tensor p = param({0.0});
  optim::Adam a({p}, {});
  optim::Scheduler sa(a, optim::cosine_schedule(0.1, 50, 5));
  for (int i = 0; i < 7; ++i) {
    set_grad(p, {1.0});
    a.step();
    sa.step();
  }
  Tensor q = param({0.0});
  optim::Adam b({q}, {});
  b.load_state_dict(a.state_dict());
  optim::Scheduler sb(b, optim::cosine_schedule(0.1, 50, 5));
  EXPECT_EQ(b.lr(), a.lr());
  EXPECT_DOUBLE_EQ(b.lr(), optim::cosine_lr(7, 0.1, 50, 5));
}
