// Helpers shared by the optimizer tests: float64 parameters, gradients set from plain doubles,
// and comparison of a tensor against reference values computed in the test.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/optim.h"

namespace adjoint::optim_test {

/// A float64 leaf that requires grad, holding `v` in `shape` (1-d when omitted).
inline Tensor param(const std::vector<double>& v, std::optional<Shape> shape = std::nullopt) {
  return tensor(v, shape).requires_grad_(true);
}

/// Sets p.grad to `g` (same shape as p).
inline void set_grad(const Tensor& p, const std::vector<double>& g) {
  p.set_grad(tensor(g, p.shape()).to(p.dtype()));
}

/// The gradient the tests feed the optimizers: smooth and different per element, so a wrong
/// index or sign shows. Applied to the reference values, then set on the tensor.
inline std::vector<double> test_grad(const std::vector<double>& p) {
  std::vector<double> g(p.size());
  for (std::size_t i = 0; i < p.size(); ++i)
    g[i] = std::sin(p[i]) + 0.25 * static_cast<double>(i) - 0.3;
  return g;
}

/// got equals want elementwise within a relative tolerance.
inline void expect_near(const Tensor& got, const std::vector<double>& want, double rel = 1e-13) {
  std::vector<double> g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size());
  for (std::size_t i = 0; i < g.size(); ++i)
    EXPECT_NEAR(g[i], want[i], rel * std::max(1.0, std::abs(want[i]))) << "at " << i;
}

/// got and want hold bitwise the same values.
inline void expect_identical(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], w[i]) << "at " << i;
}

}  // namespace adjoint::optim_test
