#include <gtest/gtest.h>

#include <cmath>

#include "adjoint/adjoint.h"

using namespace adjoint;

TEST(Smoke, WorkedExampleGradient) {
  // f(x, y) = (x + y) sin(x): df/dx = sin x + (x + y) cos x, df/dy = sin x
  Tensor x = tensor({0.7}, TensorOptions(DType::Float64).requires_grad(true));
  Tensor y = tensor({-1.3}, TensorOptions(DType::Float64).requires_grad(true));
  Tensor f = ((x + y) * sin(x)).sum();
  f.backward();
  double xv = 0.7, yv = -1.3;
  EXPECT_NEAR(x.grad().item<double>(), std::sin(xv) + (xv + yv) * std::cos(xv), 1e-12);
  EXPECT_NEAR(y.grad().item<double>(), std::sin(xv), 1e-12);
}
