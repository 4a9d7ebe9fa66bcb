// Worked examples from the source material with hand-derived gradients: for y = W x + b and
// L = <g, y>, dL/dW = g xᵀ, dL/dx = Wᵀ g and dL/db = g (checked with loops, not library ops).
#include <gtest/gtest.h>

#include "adjoint/adjoint.h"

using namespace adjoint;

TEST(WorkedExamples, LinearLayerGradients) {
  const int64_t out = 3, in = 4;
  Generator gen(11);
  Tensor W = randn({out, in}, DType::Float64, &gen).requires_grad_(true);
  Tensor b = randn({out}, DType::Float64, &gen).requires_grad_(true);
  Tensor x = randn({in}, DType::Float64, &gen).requires_grad_(true);
  Tensor g = randn({out}, DType::Float64, &gen);
  Tensor y = matmul(W, x) + b;
  y.backward(g);

  std::vector<double> w = W.to_vector<double>(), xv = x.to_vector<double>(),
                      gv = g.to_vector<double>();
  std::vector<double> dW = W.grad().to_vector<double>(), dx = x.grad().to_vector<double>();
  std::vector<double> db = b.grad().to_vector<double>();
  for (int64_t i = 0; i < out; ++i) {
    EXPECT_NEAR(db[i], gv[i], 1e-12);
    for (int64_t j = 0; j < in; ++j) EXPECT_NEAR(dW[i * in + j], gv[i] * xv[j], 1e-12);  // g xᵀ
  }
  for (int64_t j = 0; j < in; ++j) {
    double expect = 0;
    for (int64_t i = 0; i < out; ++i) expect += w[i * in + j] * gv[i];  // Wᵀ g
    EXPECT_NEAR(dx[j], expect, 1e-12);
  }
  // The fused linear op (x Wᵀ + b, batch of one) gives the same gradients.
  Tensor W2 = W.detach().clone().requires_grad_(true);
  Tensor x2 = x.detach().clone().requires_grad_(true);
  linear(x2.unsqueeze(0), W2, b.detach()).squeeze(0).backward(g);
  EXPECT_EQ(W2.grad().to_vector<double>(), dW);
  for (int64_t j = 0; j < in; ++j) EXPECT_NEAR(x2.grad().to_vector<double>()[j], dx[j], 1e-12);
}
