// In-place ops on dual tensors (Note [In-place ops on dual tensors] in
// src/autograd/forward_ad.h): the tangent follows the op whenever its level is visible, with or
// without a graph being recorded; copy_ and fill_ of values without a tangent leave a zero one;
// and in-place ops whose new tangent would not reach a view or base sharing the memory throw.
// Values are checked against hand-derived tangents and central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "support/expect.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_error;
using adjoint::testing::expect_values;
using adjoint::testing::f64_grad;

Tensor f64(std::initializer_list<double> v) { return tensor(v, DType::Float64); }
Tensor f64v(const std::vector<double>& v) { return tensor(v, std::nullopt, DType::Float64); }

TEST(DualInplace, NoGradGuardStillPropagatesTheTangent) {
  const Tensor p = f64({0.5, -1.5}), t = f64({1.0, 2.0});
  DualLevel level;
  Tensor x = make_dual(p, t);
  {
    NoGradGuard no_grad;
    x.mul_(3.0);
    x.add_(1.0);
  }
  expect_values(x, {2.5, -3.5});
  expect_values(x.tangent(), {3.0, 6.0});
  expect_values(p, {2.5, -3.5});  // make_dual's result is a view of its primal
  EXPECT_FALSE(p.tangent().defined()) << "the primal has no tangent at this level";
}

TEST(DualInplace, EveryOpFollowsItsDerivative) {
  // With grad enabled but nothing requiring grad: no graph, the tangent must still follow.
  const std::vector<double> p = {0.5, -1.5, 2.0}, tp = {1.0, 2.0, -0.5};
  const std::vector<double> q = {1.5, 0.25, -2.0}, tq = {0.5, -1.0, 3.0};
  const std::vector<double> r = {2.0, -4.0, 0.5};
  const std::vector<double> s = {0.1, 0.2, 0.3}, ts = {-1.0, 0.5, 2.0};
  DualLevel level;
  Tensor x = make_dual(f64v(p), f64v(tp));
  const Tensor qd = make_dual(f64v(q), f64v(tq));
  const Tensor sd = make_dual(f64v(s), f64v(ts));
  x.mul_(qd);       // x q:       t q + x tq
  x.div_(f64v(r));  // x / r:     t / r
  x.add_(sd, 2.0);  // x + 2 s:   t + 2 ts
  x.sub_(0.75);     // x - 0.75:  t
  x.mul_(3.0);      // 3 x:       3 t
  x.div_(2.0);      // x / 2:     t / 2
  x.sub_(qd);       // x - q:     t - tq
  std::vector<double> v(3), tv(3);
  for (int i = 0; i < 3; ++i) {
    v[i] = p[i] * q[i];
    tv[i] = tp[i] * q[i] + p[i] * tq[i];
    v[i] /= r[i];
    tv[i] /= r[i];
    v[i] += 2 * s[i];
    tv[i] += 2 * ts[i];
    v[i] = (v[i] - 0.75) * 3 / 2 - q[i];
    tv[i] = tv[i] * 3 / 2 - tq[i];
  }
  expect_values(x, v);
  expect_values(x.tangent(), tv);
  // clamp_: the tangent is zero where the value was clamped.
  x.clamp_(-1.0, 1.0);
  std::vector<double> tc(3);
  for (int i = 0; i < 3; ++i) tc[i] = (v[i] > -1 && v[i] < 1) ? tv[i] : 0.0;
  expect_values(x.tangent(), tc);
}

TEST(DualInplace, PlainTensorTakesTheOperandsTangent) {
  DualLevel level;
  const Tensor d = make_dual(f64({1.0, 2.0, 3.0}), f64({0.5, -1.0, 2.0}));
  Tensor acc = zeros({2, 3}, DType::Float64);
  acc.add_(d);  // broadcast over the rows
  acc.add_(d, -3.0);
  expect_values(acc, {-2, -4, -6, -2, -4, -6});
  expect_values(acc.tangent(), {-1, 2, -4, -1, 2, -4});
  // A float32 tensor takes a float64 operand's tangent in its own dtype.
  Tensor f = zeros({3}, DType::Float32);
  f.add_(d);
  ASSERT_TRUE(f.tangent().defined());
  EXPECT_EQ(f.tangent().dtype(), DType::Float32);
  expect_values(f.tangent(), {0.5, -1.0, 2.0});
}

TEST(DualInplace, CopyAndFillReplaceTheTangent) {
  DualLevel level;
  Tensor x = make_dual(f64({1.0, 2.0}), f64({3.0, 4.0}));
  x.copy_(f64({5.0, 6.0}));  // a value without a tangent: a constant
  expect_values(x, {5, 6});
  expect_values(x.tangent(), {0, 0});

  Tensor y = zeros({2, 2}, DType::Float64);
  y.copy_(make_dual(f64({1.0, 2.0}), f64({-1.0, 0.5})));  // broadcasts
  expect_values(y.tangent(), {-1, 0.5, -1, 0.5});

  Tensor z = make_dual(f64({1.0, 2.0}), f64({3.0, 4.0}));
  z.fill_(7.0);
  expect_values(z, {7, 7});
  expect_values(z.tangent(), {0, 0});
  Tensor w = make_dual(f64({1.0, 2.0}), f64({3.0, 4.0}));
  w.zero_();
  expect_values(w.tangent(), {0, 0});
}

TEST(DualInplace, RecordedCopyLeavesNoStaleTangent) {
  // y has history and a tangent; copy_ of a plain value is recorded and must zero the tangent.
  Tensor a = tensor({1.0, 2.0}, f64_grad());
  DualLevel level;
  Tensor y = make_dual(a, f64({3.0, 4.0})) * 2.0;
  expect_values(y.tangent(), {6, 8});
  y.copy_(f64({5.0, 6.0}));
  expect_values(y.tangent(), {0, 0});
  // And a recorded op keeps the product rule: d(y w) = ty w + y tw.
  Tensor u = make_dual(a, f64({1.0, -1.0})) * 1.0;
  u.mul_(make_dual(f64({2.0, 3.0}), f64({0.5, 0.25})));
  expect_values(u.tangent(), {1 * 2 + 1 * 0.5, -1 * 3 + 2 * 0.25});
  u.sum().backward();
  expect_values(a.grad(), {2, 3});
}

TEST(DualInplace, NoForwardGradGuardLeavesTangentsAlone) {
  // As in PyTorch, where an in-place op does not see tangents while forward grad is off.
  DualLevel level;
  Tensor x = make_dual(f64({1.0, 2.0}), f64({3.0, 4.0}));
  {
    NoForwardGradGuard off;
    x.mul_(2.0);
  }
  expect_values(x, {2, 4});
  expect_values(x.tangent(), {3, 4});
}

// f(x) = x² + 1 written with in-place ops on a copy: f'(x) t = 2 x t.
Tensor square_plus_one_inplace(const Tensor& x) {
  Tensor y = x.clone();
  y.mul_(x);
  y.add_(1.0);
  return y;
}

TEST(DualInplace, JvpAndJacfwdThroughInplaceOpsMatchFiniteDifferences) {
  const Tensor x = f64({0.5, -1.25, 2.0}), t = f64({1.0, -2.0, 0.5});
  const Tensor tangent = jvp(square_plus_one_inplace, x, t).tangents;
  expect_values(tangent, {2 * 0.5 * 1.0, 2 * -1.25 * -2.0, 2 * 2.0 * 0.5});
  const double h = 1e-6;
  const Tensor fd =
      (square_plus_one_inplace(x + t * h) - square_plus_one_inplace(x - t * h)) / (2 * h);
  expect_values(tangent, fd.to_vector<double>(), 1e-7);
  // jacfwd builds the Jacobian from the same tangents; jacrev records the in-place ops.
  const Tensor jf = jacfwd(square_plus_one_inplace)(x);
  expect_values(jf, {1, 0, 0, 0, -2.5, 0, 0, 0, 4});
  expect_values(jacrev(square_plus_one_inplace)(x), jf.to_vector<double>());
}

TEST(DualInplace, NestedLevelsGiveSecondDerivatives) {
  // y = x² by y.mul_(y): the inner tangent 2 x t2, its outer tangent 2 t1 t2.
  const Tensor t1 = f64({1.5, -1.0}), t2 = f64({2.0, 0.5});
  DualLevel outer;
  Tensor x1 = make_dual(f64({0.3, 4.0}), t1);
  Tensor inner_tangent;
  {
    DualLevel inner;
    Tensor y = make_dual(x1, t2).clone();
    y.mul_(y);
    expect_values(y, {0.09, 16});
    inner_tangent = y.tangent();
    expect_values(inner_tangent, {2 * 0.3 * 2.0, 2 * 4.0 * 0.5});
  }
  expect_values(inner_tangent.tangent(), {2 * 1.5 * 2.0, 2 * -1.0 * 0.5});
}

TEST(DualInplace, ViewOfADualThrowsAndChangesNothing) {
  DualLevel level;
  Tensor x = make_dual(f64({1.0, 2.0, 3.0}), f64({4.0, 5.0, 6.0}));
  Tensor v = x.slice(0, 0, 2);
  ASSERT_TRUE(v.tangent().defined());
  expect_error(
      [&] {
        NoGradGuard no_grad;
        v.mul_(2.0);
      },
      ErrorKind::NotImplemented, {"[mul_]", "[2] (float64)", "tangent"});
  // The base, while a dual view of it lives, for the same reason.
  expect_error([&] { x.add_(1.0); }, ErrorKind::NotImplemented, {"[add_]", "[3] (float64)"});
  expect_values(x, {1, 2, 3});
  expect_values(x.tangent(), {4, 5, 6});
  v = Tensor();
  x.add_(1.0);  // no view left: fine
  expect_values(x, {2, 3, 4});
  expect_values(x.tangent(), {4, 5, 6});
}

TEST(DualInplace, ViewTakingATangentThrows) {
  // The base would stay without a tangent while its values now depend on the dual.
  DualLevel level;
  Tensor base = zeros({3}, DType::Float64);
  Tensor v = base.slice(0, 1, 3);
  const Tensor d = make_dual(f64({1.0, 2.0}), f64({0.5, 0.5}));
  expect_error([&] { v.copy_(d); }, ErrorKind::NotImplemented,
               {"[copy_]", "view", "[2] (float64)"});
  expect_error([&] { v.add_(d); }, ErrorKind::NotImplemented, {"[add_]", "view"});
  expect_values(base, {0, 0, 0});
  // A view without tangents modified by a plain value is no concern of forward mode.
  v.add_(1.0);
  expect_values(base, {0, 1, 1});
}

}  // namespace
