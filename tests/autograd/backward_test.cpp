// Semantics of reverse mode as a PyTorch user expects them: leaves and grad_fn, seeding,
// accumulation into .grad, zero_grad, retain_grad, fan-out and broadcasting, freeing the graph,
// retain_graph, create_graph (higher derivatives) and the functional autograd::grad.
// Every expected value is derived by hand and computed here with std:: math.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::testing;

// ---- leaves, grad_fn, requires_grad ----

TEST(Backward, LeavesAndRequiresGrad) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor c = tensor({3.0, 4.0}, DType::Float64);
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_EQ(x.grad_fn(), nullptr);
  EXPECT_FALSE(c.requires_grad());
  EXPECT_TRUE(c.is_leaf());

  Tensor y = x * c;
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  ASSERT_NE(y.grad_fn(), nullptr);

  // An op on tensors that do not require grad records nothing.
  Tensor z = c * c;
  EXPECT_FALSE(z.requires_grad());
  EXPECT_TRUE(z.is_leaf());
  EXPECT_EQ(z.grad_fn(), nullptr);

  // requires_grad_ marks a leaf made without it.
  c.requires_grad_();
  EXPECT_TRUE(c.requires_grad());
  EXPECT_TRUE(c.is_leaf());
}

TEST(Backward, GradFnNames) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor y = tensor({3.0, 4.0}, f64_grad());
  EXPECT_EQ((x * y).grad_fn()->name(), "MulBackward");
  EXPECT_EQ((x + y).grad_fn()->name(), "AddBackward");
  EXPECT_EQ((x - y).grad_fn()->name(), "SubBackward");
  EXPECT_EQ((x / y).grad_fn()->name(), "DivBackward");
  EXPECT_EQ(x.exp().grad_fn()->name(), "ExpBackward");
  EXPECT_EQ(x.sin().grad_fn()->name(), "SinBackward");
  EXPECT_EQ(x.sigmoid().grad_fn()->name(), "SigmoidBackward");
  EXPECT_EQ(x.sum().grad_fn()->name(), "SumBackward");
  EXPECT_EQ(x.unsqueeze(0).expand({3, 2}).grad_fn()->name(), "ExpandBackward");
  // The edge of a leaf that requires grad is its AccumulateGrad node.
  Tensor p = x * y;
  ASSERT_EQ(p.grad_fn()->next_edges().size(), 2u);
  EXPECT_EQ(p.grad_fn()->next_edges()[0].node->name(), "AccumulateGrad");
  EXPECT_EQ(autograd::gradient_edge(x).node, p.grad_fn()->next_edges()[0].node);
}

// ---- seeding ----

TEST(Backward, ScalarOutputSeedsOne) {
  Tensor x = tensor({1.0, -2.0, 0.5}, f64_grad());
  Tensor loss = (x * 3).sum();
  EXPECT_EQ(loss.dim(), 0);
  loss.backward();
  expect_values(x.grad(), {3, 3, 3});
  EXPECT_EQ(x.grad().shape(), x.shape());
  EXPECT_EQ(x.grad().dtype(), DType::Float64);
  EXPECT_FALSE(x.grad().requires_grad());
}

TEST(Backward, OneElementNonScalarOutputSeedsOne) {
  // PyTorch allows the implicit gradient for any one-element output.
  Tensor x = tensor({2.0}, f64_grad());
  Tensor y = x * x;  // shape [1]
  y.backward();
  expect_values(x.grad(), {4});
}

TEST(Backward, NonScalarOutputNeedsExplicitGradient) {
  Tensor x = tensor({1.0, 2.0, 3.0}, f64_grad());
  Tensor y = x * 2;
  std::string msg = error_message([&] { y.backward(); }, ErrorKind::Autograd);
  EXPECT_TRUE(contains(msg, "[backward]")) << msg;
  EXPECT_TRUE(contains(msg, "[3]")) << msg;
  // A gradient of the wrong shape is a shape error.
  error_message([&] { y.backward(tensor({1.0, 1.0}, DType::Float64)); }, ErrorKind::Shape);
  // With the right gradient v, x.grad = 2 v.
  y.backward(tensor({1.0, -1.0, 0.5}, DType::Float64));
  expect_values(x.grad(), {2, -2, 1});
}

TEST(Backward, ExplicitGradientIsNotModifiedOrAliased) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor v = tensor({5.0, 7.0}, DType::Float64);
  (x + 1).backward(v);
  expect_values(x.grad(), {5, 7});
  // .grad must not be the caller's tensor: accumulating into it must leave v alone.
  (x + 1).backward(v);
  expect_values(x.grad(), {10, 14});
  expect_values(v, {5, 7});
}

// ---- accumulation and zero_grad ----

TEST(Backward, GradAccumulatesAcrossBackwardCalls) {
  Tensor x = tensor({0.5, -1.5}, f64_grad());
  Tensor loss = (x * x).sum();  // d/dx = 2x
  loss.backward(Tensor(), /*retain_graph=*/true);
  expect_values(x.grad(), {1.0, -3.0});
  loss.backward();
  expect_values(x.grad(), {2.0, -6.0});  // doubled, not replaced
  // A fresh graph accumulates as well.
  (x * 10).sum().backward();
  expect_values(x.grad(), {12.0, 4.0});
}

TEST(Backward, ZeroGradSetToNone) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  (x * 3).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  x.zero_grad();  // set_to_none = true is the default, as in PyTorch 2
  EXPECT_FALSE(x.grad().defined());
  (x * 4).sum().backward();
  expect_values(x.grad(), {4, 4});
}

TEST(Backward, ZeroGradInPlace) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  (x * 3).sum().backward();
  Tensor g = x.grad();
  x.zero_grad(/*set_to_none=*/false);
  ASSERT_TRUE(x.grad().defined());
  expect_values(x.grad(), {0, 0});
  // In place: a handle taken before sees the zeros (same storage).
  EXPECT_TRUE(x.grad().shares_storage(g));
  expect_values(g, {0, 0});
  (x * 4).sum().backward();
  expect_values(x.grad(), {4, 4});
}

// ---- retain_grad ----

TEST(Backward, NonLeafGradIsNotKeptUnlessRetained) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor y = x * 3;
  Tensor z = x * 5;
  EXPECT_FALSE(y.retains_grad());
  y.retain_grad();
  EXPECT_TRUE(y.retains_grad());
  Tensor loss = (y * y + z * z).sum();  // dL/dy = 2y, dL/dz = 2z
  loss.backward();
  expect_values(y.grad(), {6, 12});
  EXPECT_FALSE(z.grad().defined());
  // dL/dx = 2y * 3 + 2z * 5 = 18x + 50x = 68x
  expect_values(x.grad(), {68, 136});
}

TEST(Backward, RetainedGradAccumulates) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor y = x * 3;
  y.retain_grad();
  Tensor loss = (y * 2).sum();
  loss.backward(Tensor(), true);
  loss.backward();
  expect_values(y.grad(), {4, 4});
  expect_values(x.grad(), {12, 12});
}

TEST(Backward, RetainGradFollowsInPlaceOp) {
  // After an in-place op, .grad is the gradient of the tensor's new value (as in PyTorch).
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor y = x * 2;
  y.retain_grad();
  y.mul_(3);                 // y = 6x
  (y * y).sum().backward();  // dL/dy = 2y = 12x
  expect_values(y.grad(), {12, 24});
  expect_values(x.grad(), {72, 144});  // 2y * 6
}

TEST(Backward, RetainGradOnLeafIsANoOp) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  x.retain_grad();
  (x * 2).sum().backward();
  expect_values(x.grad(), {2, 2});
}

// ---- fan-out and broadcasting ----

TEST(Backward, FanOutSumsGradients) {
  // x used three times: f = sum(2x + sin x + exp x), df/dx = 2 + cos x + exp x.
  std::vector<double> xv = {0.3, -1.1, 2.0};
  Tensor x = tensor(xv, std::nullopt, f64_grad());
  (x * 2 + x.sin() + x.exp()).sum().backward();
  std::vector<double> want;
  for (double v : xv) want.push_back(2 + std::cos(v) + std::exp(v));
  expect_values(x.grad(), want);
}

TEST(Backward, SameTensorTwiceInOneOp) {
  // f = sum(x * x) uses x as both operands: df/dx = 2x.
  Tensor x = tensor({1.5, -2.0}, f64_grad());
  (x * x).sum().backward();
  expect_values(x.grad(), {3.0, -4.0});
  x.zero_grad();
  (x + x).sum().backward();
  expect_values(x.grad(), {2, 2});
}

TEST(Backward, BroadcastGradientIsSummedToInputShape) {
  // a [3] * b [2, 3]: da_j = sum_i b_ij, db_ij = a_j.
  std::vector<double> av = {1, 2, 3}, bv = {0.5, -1, 2, 4, 0.25, -3};
  Tensor a = tensor(av, std::nullopt, f64_grad());
  Tensor b = tensor(bv, Shape{2, 3}, f64_grad());
  (a * b).sum().backward();
  EXPECT_EQ(a.grad().shape(), (Shape{3}));
  EXPECT_EQ(b.grad().shape(), (Shape{2, 3}));
  expect_values(a.grad(), {bv[0] + bv[3], bv[1] + bv[4], bv[2] + bv[5]});
  expect_values(b.grad(), {1, 2, 3, 1, 2, 3});
}

TEST(Backward, BroadcastSizeOneDimsAndScalars) {
  // c [2, 1] + r [1, 3] -> [2, 3]; s is 0-d. L = sum((c + r) * s).
  Tensor c = tensor({1.0, 2.0}, Shape{2, 1}, f64_grad());
  Tensor r = tensor({1.0, 2.0, 3.0}, Shape{1, 3}, f64_grad());
  Tensor s = scalar_tensor(0.5, f64_grad());
  ((c + r) * s).sum().backward();
  EXPECT_EQ(c.grad().shape(), (Shape{2, 1}));
  EXPECT_EQ(r.grad().shape(), (Shape{1, 3}));
  EXPECT_EQ(s.grad().shape(), (Shape{}));
  expect_values(c.grad(), {1.5, 1.5});  // 3 columns * 0.5
  expect_values(r.grad(), {1.0, 1.0, 1.0});
  // dL/ds = sum(c + r) = 3 * (1 + 2) + 2 * (1 + 2 + 3) = 21
  expect_values(s.grad(), {21});
}

TEST(Backward, GradientDtypeMatchesInput) {
  // A float32 leaf combined with float64 gets a float32 gradient.
  Tensor x = tensor({1.0, 2.0}, TensorOptions(DType::Float32).requires_grad(true));
  Tensor w = tensor({3.0, 4.0}, DType::Float64);
  Tensor y = (x * w).sum();
  EXPECT_EQ(y.dtype(), DType::Float64);
  y.backward();
  EXPECT_EQ(x.grad().dtype(), DType::Float32);
  expect_values(x.grad(), {3, 4});
}

// ---- worked examples ----

TEST(Backward, WorkedExampleProductWithSine) {
  // f(x, y) = (x + y) sin x: df/dx = sin x + (x + y) cos x, df/dy = sin x.
  std::vector<double> xv = {0.7, -0.2, 1.9}, yv = {-1.3, 0.4, 2.5};
  Tensor x = tensor(xv, std::nullopt, f64_grad());
  Tensor y = tensor(yv, std::nullopt, f64_grad());
  Tensor f = ((x + y) * x.sin()).sum();
  double fv = 0;
  for (int i = 0; i < 3; ++i) fv += (xv[i] + yv[i]) * std::sin(xv[i]);
  EXPECT_NEAR(f.item<double>(), fv, 1e-12);
  f.backward();
  std::vector<double> gx, gy;
  for (int i = 0; i < 3; ++i) {
    gx.push_back(std::sin(xv[i]) + (xv[i] + yv[i]) * std::cos(xv[i]));
    gy.push_back(std::sin(xv[i]));
  }
  expect_values(x.grad(), gx);
  expect_values(y.grad(), gy);
}

TEST(Backward, SigmoidDerivative) {
  // sigmoid'(x) = y (1 - y) with y = 1 / (1 + exp(-x)).
  std::vector<double> xv = {-3.0, -0.5, 0.0, 0.8, 4.0};
  Tensor x = tensor(xv, std::nullopt, f64_grad());
  x.sigmoid().sum().backward();
  std::vector<double> want;
  for (double v : xv) {
    double y = 1 / (1 + std::exp(-v));
    want.push_back(y * (1 - y));
  }
  expect_values(x.grad(), want);
}

TEST(Backward, TwoLayerNetworkWithoutMatmul) {
  // L = sum_o (sum_h W2[o,h] s(sum_d W1[h,d] x[d]))^2, written with broadcasting mul and sum.
  // Hand-derived: out_o = sum_h W2[o,h] a_h, a_h = s(h_h), h_h = sum_d W1[h,d] x_d;
  //   dL/dout_o = 2 out_o;  dL/dW2[o,h] = 2 out_o a_h;  dL/da_h = sum_o 2 out_o W2[o,h];
  //   dL/dh_h = dL/da_h a_h (1 - a_h);  dL/dW1[h,d] = dL/dh_h x_d;
  //   dL/dx_d = sum_h dL/dh_h W1[h,d].
  constexpr int D = 3, H = 4, O = 2;
  std::vector<double> w1(H * D), w2(O * H), xv(D);
  for (int i = 0; i < H * D; ++i) w1[i] = 0.3 * std::sin(1.0 + i);
  for (int i = 0; i < O * H; ++i) w2[i] = 0.5 * std::cos(0.7 * i);
  for (int i = 0; i < D; ++i) xv[i] = 0.4 * i - 0.5;
  Tensor W1 = tensor(w1, Shape{H, D}, f64_grad());
  Tensor W2 = tensor(w2, Shape{O, H}, f64_grad());
  Tensor x = tensor(xv, std::nullopt, f64_grad());

  Tensor h = (W1 * x).sum({1});    // [H]
  Tensor a = h.sigmoid();          // [H]
  Tensor out = (W2 * a).sum({1});  // [O]
  Tensor L = out.square().sum();
  L.backward();

  double hv[H], av[H], ov[O], Lv = 0;
  for (int i = 0; i < H; ++i) {
    hv[i] = 0;
    for (int d = 0; d < D; ++d) hv[i] += w1[i * D + d] * xv[d];
    av[i] = 1 / (1 + std::exp(-hv[i]));
  }
  for (int o = 0; o < O; ++o) {
    ov[o] = 0;
    for (int i = 0; i < H; ++i) ov[o] += w2[o * H + i] * av[i];
    Lv += ov[o] * ov[o];
  }
  EXPECT_NEAR(L.item<double>(), Lv, 1e-12);
  std::vector<double> gW2(O * H), gW1(H * D), gx(D, 0.0);
  double dh[H];
  for (int i = 0; i < H; ++i) {
    double da = 0;
    for (int o = 0; o < O; ++o) {
      gW2[o * H + i] = 2 * ov[o] * av[i];
      da += 2 * ov[o] * w2[o * H + i];
    }
    dh[i] = da * av[i] * (1 - av[i]);
    for (int d = 0; d < D; ++d) {
      gW1[i * D + d] = dh[i] * xv[d];
      gx[d] += dh[i] * w1[i * D + d];
    }
  }
  expect_values(W2.grad(), gW2);
  expect_values(W1.grad(), gW1);
  expect_values(x.grad(), gx);
}

// ---- freeing the graph, retain_graph ----

TEST(Backward, SecondBackwardThroughFreedGraphThrows) {
  Tensor x = tensor({0.1, 0.2}, f64_grad());
  Tensor y = x.exp();
  Tensor loss = y.sum();
  loss.backward();
  std::string msg = error_message([&] { loss.backward(); }, ErrorKind::Autograd);
  EXPECT_TRUE(contains(msg, "ExpBackward")) << msg;
  EXPECT_TRUE(contains(msg, "retain_graph")) << msg;
  EXPECT_TRUE(contains(msg, "second time")) << msg;
  // The first backward's result stands.
  expect_values(x.grad(), {std::exp(0.1), std::exp(0.2)});
}

TEST(Backward, SecondBackwardThroughFreedInputSavingNodeThrows) {
  // Mul saves its inputs rather than its output; the message names that op.
  Tensor x = tensor({0.1, 0.2}, f64_grad());
  Tensor loss = (x * x).sum();
  loss.backward();
  std::string msg = error_message([&] { loss.backward(); }, ErrorKind::Autograd);
  EXPECT_TRUE(contains(msg, "MulBackward")) << msg;
  EXPECT_TRUE(contains(msg, "retain_graph")) << msg;
}

TEST(Backward, RetainGraphAllowsSecondBackward) {
  std::vector<double> xv = {0.1, -0.4};
  Tensor x = tensor(xv, std::nullopt, f64_grad());
  Tensor loss = x.exp().sin().sum();  // d/dx = cos(exp x) exp x
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();
  std::vector<double> want;
  for (double v : xv) want.push_back(3 * std::cos(std::exp(v)) * std::exp(v));
  expect_values(x.grad(), want);
  EXPECT_THROW(loss.backward(), Error);
}

TEST(Backward, GraphWithoutSavedTensorsCanRunTwice) {
  // Nothing was freed, so (as in PyTorch) a second backward works and accumulates.
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor loss = (x * 3 + 1).sum();
  loss.backward();
  loss.backward();
  expect_values(x.grad(), {6, 6});
}

// ---- create_graph: higher derivatives ----

TEST(Backward, CreateGraphSecondDerivativeOfCube) {
  // d/dx x^3 = 3x^2, d2/dx2 = 6x.
  std::vector<double> xv = {1.3, -0.7};
  Tensor x = tensor(xv, std::nullopt, f64_grad());
  Tensor y = (x * x * x).sum();
  std::vector<Tensor> g = autograd::grad({y}, {x}, {}, std::nullopt, /*create_graph=*/true);
  ASSERT_EQ(g.size(), 1u);
  EXPECT_TRUE(g[0].requires_grad());
  ASSERT_NE(g[0].grad_fn(), nullptr);
  expect_values(g[0], {3 * xv[0] * xv[0], 3 * xv[1] * xv[1]});
  EXPECT_FALSE(x.grad().defined());
  std::vector<Tensor> gg = autograd::grad({g[0].sum()}, {x});
  expect_values(gg[0], {6 * xv[0], 6 * xv[1]});
}

TEST(Backward, CreateGraphThroughPow) {
  // d/dx x^3 via pow: 3x^2, then 6x, then 6.
  Tensor x = tensor({2.0}, f64_grad());
  Tensor y = x.pow(3).sum();
  Tensor g1 = autograd::grad({y}, {x}, {}, std::nullopt, true)[0];
  Tensor g2 = autograd::grad({g1.sum()}, {x}, {}, std::nullopt, true)[0];
  Tensor g3 = autograd::grad({g2.sum()}, {x})[0];
  expect_values(g1, {12});
  expect_values(g2, {12});
  expect_values(g3, {6});
}

TEST(Backward, CreateGraphSecondDerivativeOfSin) {
  // d/dx sin = cos, d2/dx2 sin = -sin.
  std::vector<double> xv = {0.3, 2.1, -1.0};
  Tensor x = tensor(xv, std::nullopt, f64_grad());
  Tensor g = autograd::grad({x.sin().sum()}, {x}, {}, std::nullopt, true)[0];
  std::vector<double> cosv, msin;
  for (double v : xv) {
    cosv.push_back(std::cos(v));
    msin.push_back(-std::sin(v));
  }
  expect_values(g, cosv);
  Tensor gg = autograd::grad({g.sum()}, {x})[0];
  expect_values(gg, msin);
}

TEST(Backward, BackwardWithCreateGraphGivesDifferentiableGrad) {
  // backward(create_graph) leaves a .grad that has history: differentiating it gives 6x.
  Tensor x = tensor({1.5}, f64_grad());
  (x * x * x).sum().backward(Tensor(), false, /*create_graph=*/true);
  Tensor g = x.grad();
  ASSERT_TRUE(g.defined());
  EXPECT_TRUE(g.requires_grad());
  expect_values(g, {3 * 1.5 * 1.5});
  x.zero_grad();
  g.sum().backward();
  expect_values(x.grad(), {6 * 1.5});
}

TEST(Backward, WithoutCreateGraphGradHasNoHistory) {
  Tensor x = tensor({1.5}, f64_grad());
  Tensor g = autograd::grad({(x * x * x).sum()}, {x})[0];
  EXPECT_FALSE(g.requires_grad());
  EXPECT_EQ(g.grad_fn(), nullptr);
}

// ---- autograd::grad ----

TEST(Backward, FunctionalGradDoesNotTouchDotGrad) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor w = tensor({3.0, -1.0}, f64_grad());
  Tensor y = (x * w).sum();
  std::vector<Tensor> g = autograd::grad({y}, {x});
  expect_values(g[0], {3, -1});
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());  // not an input: not accumulated either
}

TEST(Backward, FunctionalGradOfSeveralInputsAndNonLeaves) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor w = tensor({3.0, -1.0}, f64_grad());
  Tensor h = x * w;          // non-leaf input
  Tensor y = (h * h).sum();  // dy/dh = 2h
  std::vector<Tensor> g = autograd::grad({y}, {h, x, w});
  ASSERT_EQ(g.size(), 3u);
  expect_values(g[0], {6, -4});  // 2 h
  expect_values(g[1], {18, 4});  // 2 h w
  expect_values(g[2], {6, -8});  // 2 h x
}

TEST(Backward, FunctionalGradWithExplicitGradOutputs) {
  Tensor x = tensor({1.0, 2.0, 3.0}, f64_grad());
  Tensor y = x * x;
  std::vector<Tensor> g = autograd::grad({y}, {x}, {tensor({1.0, 0.0, -1.0}, DType::Float64)});
  expect_values(g[0], {2, 0, -6});
}

TEST(Backward, FunctionalGradUnusedInput) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor unused = tensor({5.0}, f64_grad());
  Tensor y = (x * 2).sum();
  std::string msg = error_message(
      [&] {
        autograd::grad({y}, {x, unused}, {}, /*retain_graph=*/true);
      },
      ErrorKind::Autograd);
  EXPECT_TRUE(contains(msg, "allow_unused")) << msg;
  std::vector<Tensor> g = autograd::grad({y}, {x, unused}, {}, std::nullopt, false,
                                         /*allow_unused=*/true);
  ASSERT_EQ(g.size(), 2u);
  expect_values(g[0], {2, 2});
  EXPECT_FALSE(g[1].defined());
}

TEST(Backward, GradOfTensorThatDoesNotRequireGradThrows) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor c = tensor({1.0, 2.0}, DType::Float64);
  Tensor y = (x * c).sum();
  error_message([&] { autograd::grad({y}, {c}); }, ErrorKind::Autograd);
  // An output without history cannot be differentiated either.
  Tensor z = (c * c).sum();
  std::string msg = error_message([&] { z.backward(); }, ErrorKind::Autograd);
  EXPECT_TRUE(contains(msg, "does not require grad")) << msg;
  error_message([&] { autograd::grad({z}, {x}); }, ErrorKind::Autograd);
}

TEST(Backward, FunctionalGradOfOutputItself) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor y = (x * 2).sum();
  expect_values(autograd::grad({y}, {y})[0], {1});
}

TEST(Backward, GradModeRestoredAfterFailedBackward) {
  Tensor x = tensor({1.0}, f64_grad());
  Tensor y = x.exp();
  y.mul_(2);  // invalidates ExpBackward
  EXPECT_THROW(y.sum().backward(Tensor(), false, /*create_graph=*/true), Error);
  EXPECT_TRUE(is_grad_enabled());
  Tensor z = x.exp();
  z.mul_(2);
  Tensor loss = z.sum();
  {
    NoGradGuard no_grad;
    EXPECT_THROW(loss.backward(Tensor(), false, /*create_graph=*/true), Error);
    EXPECT_FALSE(is_grad_enabled());
  }
}

TEST(Backward, MultipleRootsAccumulate) {
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor a = (x * 2).sum();
  Tensor b = (x * x).sum();
  autograd::backward({a, b});
  expect_values(x.grad(), {4, 6});  // 2 + 2x
}
