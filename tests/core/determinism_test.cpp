// Determinism: the same seed and thread count give bitwise the same training run, and the
// elementwise and reduction kernels give the same bits whatever the thread count.
#include <gtest/gtest.h>

#include <vector>

#include "adjoint/adjoint.h"

using namespace adjoint;

namespace {
// A few SGD steps of a small MLP with dropout; returns every loss and the final weights.
std::vector<float> train(uint64_t seed) {
  Generator gen(seed);
  Tensor w1 = (randn({32, 8}, {}, &gen) * 0.3).requires_grad_(true);
  Tensor b1 = zeros({32}).requires_grad_(true);
  Tensor w2 = (randn({4, 32}, {}, &gen) * 0.3).requires_grad_(true);
  Tensor x = randn({64, 8}, {}, &gen);
  Tensor y = randint(0, 4, {64}, &gen);
  std::vector<float> trace;
  for (int step = 0; step < 5; ++step) {
    Tensor h = dropout(tanh(linear(x, w1, b1)), 0.2, true, &gen);
    Tensor loss = cross_entropy(linear(h, w2), y);
    loss.backward();
    trace.push_back(loss.item<float>());
    NoGradGuard no_grad;
    for (Tensor* p : {&w1, &b1, &w2}) {
      p->sub_(p->grad(), 0.1);
      p->zero_grad();
    }
  }
  for (float v : w2.to_vector<float>()) trace.push_back(v);
  return trace;
}
}  // namespace

TEST(Determinism, SameSeedSameRunBitwise) {
  std::vector<float> a = train(42), b = train(42), c = train(43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(Determinism, KernelsIgnoreThreadCount) {
  Generator gen(5);
  Tensor x = randn({513, 1027}, {}, &gen);
  set_num_threads(1);
  std::vector<float> one_tanh = tanh(x).to_vector<float>();
  std::vector<float> one_sum = x.sum({0}).to_vector<float>();
  float one_total = x.sum().item<float>();
  set_num_threads(2);
  EXPECT_EQ(tanh(x).to_vector<float>(), one_tanh);
  EXPECT_EQ(x.sum({0}).to_vector<float>(), one_sum);
  EXPECT_EQ(x.sum().item<float>(), one_total);
}
