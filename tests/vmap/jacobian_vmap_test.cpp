// jacrev and jacfwd run every row (column) of the Jacobian in one vmap; the loop over rows
// (detail::jacrev_loop_lists / jacfwd_loop_lists, one backward or forward pass per row) is
// their oracle, on functions with several inputs and outputs, an unused input, broadcasting,
// reductions, matmuls, an empty input and a second order (hessian = jacfwd of jacrev).
#include <gtest/gtest.h>

#include "adjoint/adjoint.h"

namespace {

using namespace adjoint;
using detail::Jacobian;

void expect_same(const Jacobian& got, const Jacobian& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t o = 0; o < got.size(); ++o) {
    ASSERT_EQ(got[o].size(), want[o].size());
    for (std::size_t a = 0; a < got[o].size(); ++a) {
      ASSERT_EQ(got[o][a].shape(), want[o][a].shape()) << "output " << o << " argument " << a;
      if (got[o][a].numel() == 0) continue;
      EXPECT_LE((got[o][a] - want[o][a]).abs().max().item<double>(), 1e-12)
          << "output " << o << " argument " << a;
    }
  }
}

std::vector<Tensor> two_layer(const std::vector<Tensor>& xs) {
  // xs: x [3], w1 [4, 3], w2 [2, 4], unused [5]
  Tensor h = tanh(matmul(xs[1], xs[0]));
  Tensor y = sigmoid(matmul(xs[2], h));
  return {y, (h * h).sum(), softmax(matmul(xs[1], xs[0]).unsqueeze(0) * 2.0, -1)};
}

std::vector<Tensor> inputs() {
  Generator gen(3);
  return {randn({3}, DType::Float64, &gen), randn({4, 3}, DType::Float64, &gen),
          randn({2, 4}, DType::Float64, &gen), randn({5}, DType::Float64, &gen)};
}

TEST(JacobianVmap, JacrevEqualsTheLoopOverRows) {
  const auto xs = inputs();
  const std::vector<int> args{0, 1, 2, 3};
  expect_same(detail::jacrev_lists(two_layer, xs, args, Unused::Zero),
              detail::jacrev_loop_lists(two_layer, xs, args, Unused::Zero));
}

TEST(JacobianVmap, JacfwdEqualsTheLoopOverColumns) {
  const auto xs = inputs();
  const std::vector<int> args{0, 1, 2, 3};
  expect_same(detail::jacfwd_lists(two_layer, xs, args),
              detail::jacfwd_loop_lists(two_layer, xs, args));
}

TEST(JacobianVmap, BothModesAgree) {
  const auto xs = inputs();
  const std::vector<int> args{0, 2};
  expect_same(detail::jacrev_lists(two_layer, xs, args, Unused::Zero),
              detail::jacfwd_lists(two_layer, xs, args));
}

TEST(JacobianVmap, UnusedInputIsAnErrorWhenAskedFor) {
  const auto xs = inputs();
  EXPECT_THROW(detail::jacrev_lists(two_layer, xs, {3}, Unused::Error), Error);
}

TEST(JacobianVmap, EmptyInputAndEmptyOutput) {
  auto f = [](const std::vector<Tensor>& xs) {
    return std::vector<Tensor>{xs[0] * 2.0, xs[1].sum() * xs[0].sum()};
  };
  const std::vector<Tensor> xs{tensor({1.0, 2.0}, DType::Float64), zeros({0}, DType::Float64)};
  expect_same(detail::jacrev_lists(f, xs, {0, 1}, Unused::Zero),
              detail::jacrev_loop_lists(f, xs, {0, 1}, Unused::Zero));
  expect_same(detail::jacfwd_lists(f, xs, {0, 1}), detail::jacfwd_loop_lists(f, xs, {0, 1}));
}

TEST(JacobianVmap, HessianEqualsTheLoopOfLoops) {
  // hessian through the vectorized transforms against jacfwd_loop of jacrev_loop.
  auto f = [](const std::vector<Tensor>& xs) {
    return std::vector<Tensor>{(tanh(matmul(xs[1], xs[0])) * xs[0].sum()).sum()};
  };
  const auto xs = inputs();
  auto grad_loop = [&](const std::vector<Tensor>& ys) {
    return std::vector<Tensor>{
        detail::jacrev_loop_lists(f, ys, {0}, Unused::Zero)[0][0].reshape({3})};
  };
  const Jacobian want = detail::jacfwd_loop_lists(grad_loop, xs, {0});
  const Jacobian got = detail::hessian_lists(f, xs, {0});
  ASSERT_EQ(got[0][0].shape(), (Shape{3, 3}));
  EXPECT_LE((got[0][0] - want[0][0]).abs().max().item<double>(), 1e-12);
}

}  // namespace
