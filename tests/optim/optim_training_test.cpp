// Optimizers in training loops: gradient accumulation over micro-batches equals the full
// batch, and each optimizer drives the loss of a small least-squares problem down.
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "optim/optim_test_util.h"

using namespace adjoint;
using namespace adjoint::optim_test;

namespace {

struct Problem {
  Tensor x, y;  // y = x w* + b* + noise
};

Problem least_squares(int64_t n, uint64_t seed) {
  Generator gen(seed);
  Tensor x = randn({n, 3}, DType::Float64, &gen);
  Tensor w = tensor({1.5, -2.0, 0.5}, Shape{3, 1}, DType::Float64);
  Tensor y = matmul(x, w) + 0.7 + 0.01 * randn({n, 1}, DType::Float64, &gen);
  return {x, y};
}

Tensor loss_of(const Tensor& w, const Tensor& b, const Tensor& x, const Tensor& y) {
  return mse_loss(matmul(x, w) + b, y);
}

}  // namespace

TEST(Training, GradientAccumulationMatchesTheFullBatch) {
  const Problem pr = least_squares(24, 1);
  Generator gen(2);
  Tensor w = randn({3, 1}, DType::Float64, &gen).requires_grad_(true);
  Tensor b = zeros({1}, DType::Float64).requires_grad_(true);

  loss_of(w, b, pr.x, pr.y).backward();
  const Tensor gw = w.grad().clone(), gb = b.grad().clone();
  w.zero_grad();
  b.zero_grad();

  // Four micro-batches of 6: each mean loss divided by 4, gradients summed by backward.
  const int64_t n_micro = 4;
  std::vector<Tensor> xs = split(pr.x, 6), ys = split(pr.y, 6);
  for (int64_t i = 0; i < n_micro; ++i) (loss_of(w, b, xs[i], ys[i]) / n_micro).backward();
  expect_near(w.grad(), gw.to_vector<double>(), 1e-12);
  expect_near(b.grad(), gb.to_vector<double>(), 1e-12);

  // And the optimizer step from accumulated gradients is the full-batch step.
  Tensor w2 = w.detach().clone().requires_grad_(true), b2 = b.detach().clone().requires_grad_(true);
  w2.set_grad(gw);
  b2.set_grad(gb);
  optim::AdamW o1({w, b}, {.lr = 0.1}), o2({w2, b2}, {.lr = 0.1});
  o1.step();
  o2.step();
  expect_near(w, w2.to_vector<double>(), 1e-12);
  expect_near(b, b2.to_vector<double>(), 1e-12);
}

TEST(Training, EveryOptimizerDrivesTheLossDown) {
  using Make = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;
  const std::vector<std::pair<std::string, Make>> makers = {
      {"SGD", [](auto p) { return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1}); }},
      {"SGD momentum",
       [](auto p) {
         return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.02, .momentum = 0.9});
       }},
      {"SGD nesterov + weight decay",
       [](auto p) {
         return std::make_unique<optim::SGD>(
             p, optim::SGDOptions{
                    .lr = 0.02, .momentum = 0.9, .nesterov = true, .weight_decay = 1e-4});
       }},
      {"Adam",
       [](auto p) { return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.05}); }},
      {"AdamW",
       [](auto p) {
         return std::make_unique<optim::AdamW>(
             p, optim::AdamWOptions{.lr = 0.05, .weight_decay = 0.01});
       }},
  };
  const Problem pr = least_squares(64, 3);
  for (const auto& [name, make] : makers) {
    Tensor w = zeros({3, 1}, DType::Float64).requires_grad_(true);
    Tensor b = zeros({1}, DType::Float64).requires_grad_(true);
    auto opt = make({w, b});
    double first = 0, last = 0;
    for (int step = 0; step < 300; ++step) {
      opt->zero_grad();
      Tensor loss = loss_of(w, b, pr.x, pr.y);
      loss.backward();
      opt->step();
      (step == 0 ? first : last) = loss.item<double>();
    }
    EXPECT_LT(last, 0.01 * first) << name << ": " << first << " -> " << last;
    expect_near(w, {1.5, -2.0, 0.5}, 0.05);
  }
}
