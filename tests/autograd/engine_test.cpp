// The backward engine's structural guarantees: deep graphs (a million nodes) backpropagate and
// are destroyed without recursion, shared subgraphs run once with summed gradients, saved
// tensors and gradient buffers are released as soon as they are consumed (checked with the
// allocator's byte counts), and forward-mode basics under DualLevel.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::testing;

namespace {

std::size_t current_bytes() { return memory_stats().current_bytes; }

constexpr int kMillion = 1000000;

}  // namespace

// ---- deep graphs ----

TEST(Engine, MillionOpChainBackpropagates) {
  // y = x k^N, so dy/dx = k^N; N = 10^6 nodes would overflow a recursive engine.
  const double k = 1.0000001;
  Tensor x = tensor({1.0}, f64_grad());
  Tensor y = x;
  for (int i = 0; i < kMillion; ++i) y = y * k;
  const double want = std::pow(k, kMillion);
  EXPECT_NEAR(y.item<double>(), want, 1e-8 * want);
  y.backward();
  EXPECT_NEAR(x.grad().item<double>(), want, 1e-8 * want);
}

TEST(Engine, MillionOpChainWithSavedInputsBackpropagates) {
  // Alternating y * w (saves both inputs, so each node holds the previous output) and
  // y * k: dy/dx = (w k)^(N/2), dy/dw = (N/2) y / w.
  const double k = 1.0000002, wv = 0.9999999;
  Tensor x = tensor({1.0}, f64_grad());
  Tensor w = tensor({wv}, f64_grad());
  Tensor y = x;
  for (int i = 0; i < kMillion / 2; ++i) y = (y * w) * k;
  const double yv = std::pow(wv * k, kMillion / 2);
  y.backward();
  EXPECT_NEAR(x.grad().item<double>(), yv, 1e-8 * yv);
  const double gw = (kMillion / 2) * yv / wv;
  EXPECT_NEAR(w.grad().item<double>(), gw, 1e-8 * gw);
}

TEST(Engine, DroppingMillionNodeGraphDoesNotOverflow) {
  Tensor x = tensor({1.0}, f64_grad());
  Tensor w = tensor({1.0}, f64_grad());
  const std::size_t before = current_bytes();
  {
    Tensor y = x;
    for (int i = 0; i < kMillion; ++i) y = (i % 2) ? y * w : y * 1.0000001;
    EXPECT_GT(current_bytes(), before);
  }  // last reference dropped here, without backward
  EXPECT_EQ(current_bytes(), before);
  // The leaves are intact and usable.
  (x * w).sum().backward();
  expect_values(x.grad(), {1});
}

TEST(Engine, DroppingMillionNodeGraphAfterRetainedBackward) {
  // y <- sin(y) + 0, 500k times (a million nodes): dy/dx = prod_i cos(y_i).
  constexpr int kSteps = kMillion / 2;
  Tensor x = tensor({1.0}, f64_grad());
  const std::size_t before = current_bytes();
  {
    Tensor y = x;
    for (int i = 0; i < kSteps; ++i) y = y.sin() + 0.0;
    y.backward(Tensor(), /*retain_graph=*/true);
  }  // the retained graph is dropped here
  const std::size_t grad_bytes = x.grad().nbytes() > 0 ? 64 : 0;  // one size-class block
  EXPECT_EQ(current_bytes(), before + grad_bytes);
  double yv = 1.0, d = 1.0;
  for (int i = 0; i < kSteps; ++i) {
    d *= std::cos(yv);
    yv = std::sin(yv);
  }
  EXPECT_NEAR(x.grad().item<double>(), d, 1e-7 * std::abs(d));
}

// ---- scheduling ----

TEST(Engine, SharedSubgraphRunsOnceWithSummedGradient) {
  // y = exp(x) feeds two branches; its node must run once, with dL/dy = cos y - sin y.
  const double xv = 0.3;
  Tensor x = tensor({xv}, f64_grad());
  Tensor y = x.exp();
  int calls = 0;
  Tensor seen;
  y.register_hook([&](const Tensor& g) {
    ++calls;
    seen = g.clone();
    return Tensor();
  });
  (y.sin() + y.cos()).sum().backward();
  const double yv = std::exp(xv);
  EXPECT_EQ(calls, 1);
  expect_values(seen, {std::cos(yv) - std::sin(yv)});
  expect_values(x.grad(), {(std::cos(yv) - std::sin(yv)) * yv});
}

TEST(Engine, RootThatFeedsAnotherRoot) {
  // backward({a, b}) with b = 3a: a's node runs once, after b's gradient reached it.
  Tensor x = tensor({1.0, 2.0}, f64_grad());
  Tensor a = x * 2;
  Tensor b = a * 3;
  int calls = 0;
  a.register_hook([&](const Tensor& g) {
    ++calls;
    return Tensor();
  });
  autograd::backward({a, b}, {ones({2}, DType::Float64), ones({2}, DType::Float64)});
  EXPECT_EQ(calls, 1);
  expect_values(x.grad(), {8, 8});  // 2 + 3 * 2
}

TEST(Engine, WideFanIn) {
  // x feeds 1000 products: dL/dx = sum_i c_i with c_i = i.
  Tensor x = tensor({1.0}, f64_grad());
  Tensor total = zeros({1}, DType::Float64);
  for (int i = 0; i < 1000; ++i) total = total + x * static_cast<double>(i);
  total.backward();
  expect_values(x.grad(), {999.0 * 1000.0 / 2});
}

TEST(Engine, BranchWithoutGradientContributesNothing) {
  // Only a's branch reaches the loss with a gradient; b's leaf is untouched.
  Tensor a = tensor({2.0}, f64_grad());
  Tensor b = tensor({3.0}, f64_grad());
  Tensor loss = (a * 4).sum();
  Tensor unrelated = b.exp();
  (void)unrelated;
  loss.backward();
  expect_values(a.grad(), {4});
  EXPECT_FALSE(b.grad().defined());
}

// ---- memory: saved tensors and buffers released as they are consumed ----

namespace {
constexpr int64_t kBig = int64_t{1} << 20;  // elements: 4 MiB in float32
constexpr int kDepth = 20;

// 20 exp nodes, each saving its [1 << 20] output; exp(-y) keeps the values in (0, 1].
Tensor exp_chain(const Tensor& x) {
  Tensor y = x;
  for (int i = 0; i < kDepth; ++i) y = (y * -1.0).exp();
  return y;
}
}  // namespace

TEST(Engine, SavedTensorsFreedDuringBackward) {
  Tensor x = full({kBig}, 0.5, TensorOptions().requires_grad(true));
  const std::size_t bytes = static_cast<std::size_t>(x.nbytes());
  const std::size_t before = current_bytes();
  Tensor y = exp_chain(x);
  Tensor loss = y.sum();
  const std::size_t after_forward = current_bytes();
  // The 20 saved outputs are alive (the last one is y itself).
  EXPECT_GE(after_forward, before + kDepth * bytes);
  loss.backward();
  ASSERT_TRUE(x.grad().defined());
  // Only y (held by us), loss and x.grad remain.
  EXPECT_LE(current_bytes(), before + 2 * bytes + 4096);
  y = Tensor();
  loss = Tensor();
  EXPECT_EQ(current_bytes(), before + x.grad().nbytes());
}

TEST(Engine, RetainGraphKeepsSavedTensorsUntilGraphDropped) {
  Tensor x = full({kBig}, 0.5, TensorOptions().requires_grad(true));
  const std::size_t bytes = static_cast<std::size_t>(x.nbytes());
  const std::size_t before = current_bytes();
  Tensor y = exp_chain(x);
  Tensor loss = y.sum();
  loss.backward(Tensor(), /*retain_graph=*/true);
  EXPECT_GE(current_bytes(), before + kDepth * bytes);
  loss.backward();  // the retained graph works a second time, then is freed
  EXPECT_LE(current_bytes(), before + 2 * bytes + 4096);
  y = Tensor();
  loss = Tensor();
  EXPECT_EQ(current_bytes(), before + x.grad().nbytes());
}

TEST(Engine, PeakDuringBackwardStaysNearForwardLevel) {
  // Backward frees each saved output as it allocates the next gradient, so it never needs
  // much more than what the forward left alive.
  Tensor x = full({kBig}, 0.5, TensorOptions().requires_grad(true));
  const std::size_t bytes = static_cast<std::size_t>(x.nbytes());
  Tensor y = exp_chain(x);
  Tensor loss = y.sum();
  const std::size_t after_forward = current_bytes();
  reset_peak_memory_stats();
  loss.backward();
  EXPECT_LE(memory_stats().peak_bytes, after_forward + 3 * bytes);
}

TEST(Engine, GraphDroppedWithoutBackwardFreesEverything) {
  Tensor x = full({kBig}, 0.5, TensorOptions().requires_grad(true));
  const std::size_t before = current_bytes();
  {
    Tensor loss = exp_chain(x).sum();
    EXPECT_GT(current_bytes(), before);
  }
  EXPECT_EQ(current_bytes(), before);
}

TEST(Engine, FunctionalGradFreesGraph) {
  Tensor x = full({kBig}, 0.5, TensorOptions().requires_grad(true));
  const std::size_t bytes = static_cast<std::size_t>(x.nbytes());
  const std::size_t before = current_bytes();
  Tensor g;
  {
    Tensor loss = exp_chain(x).sum();
    g = autograd::grad({loss}, {x})[0];
    EXPECT_LE(current_bytes(), before + 2 * bytes + 4096);
  }
  EXPECT_EQ(current_bytes(), before + g.nbytes());
  EXPECT_FALSE(x.grad().defined());
}

// ---- forward mode basics ----

TEST(ForwardMode, SinTangentIsCosTimesTangent) {
  std::vector<double> xv = {0.2, 1.4, -2.0}, tv = {1.0, -0.5, 3.0};
  Tensor x = tensor(xv, std::nullopt, DType::Float64);
  Tensor t = tensor(tv, std::nullopt, DType::Float64);
  EXPECT_FALSE(is_forward_grad_enabled());
  DualLevel level;
  EXPECT_TRUE(is_forward_grad_enabled());
  Tensor d = make_dual(x, t);
  Tensor y = d.sin();
  auto [primal, tangent] = unpack_dual(y);
  std::vector<double> p, tan;
  for (int i = 0; i < 3; ++i) {
    p.push_back(std::sin(xv[i]));
    tan.push_back(std::cos(xv[i]) * tv[i]);
  }
  expect_values(primal, p);
  ASSERT_TRUE(tangent.defined());
  expect_values(tangent, tan);
  EXPECT_FALSE(primal.tangent().defined());
}

TEST(ForwardMode, ProductAndChainRules) {
  // d(x y) = tx y + x ty;  d exp(sin x) = exp(sin x) cos x tx.
  const double xv = 0.7, yv = -1.2, tx = 0.3, ty = 2.0;
  DualLevel level;
  Tensor x = make_dual(tensor({xv}, DType::Float64), tensor({tx}, DType::Float64));
  Tensor y = make_dual(tensor({yv}, DType::Float64), tensor({ty}, DType::Float64));
  expect_values(unpack_dual(x * y).second, {tx * yv + xv * ty});
  expect_values(unpack_dual(x.sin().exp()).second, {std::exp(std::sin(xv)) * std::cos(xv) * tx});
  // A tensor without a tangent acts as a constant.
  Tensor c = tensor({5.0}, DType::Float64);
  EXPECT_FALSE(unpack_dual(c).second.defined());
  expect_values(unpack_dual(x * c + c).second, {5 * tx});
  // Broadcasting and reductions carry tangents too.
  Tensor v =
      make_dual(tensor({1.0, 2.0, 3.0}, DType::Float64), tensor({1.0, 1.0, 1.0}, DType::Float64));
  expect_values(unpack_dual((v * x).sum()).second, {6 * tx + 3 * xv});
}

TEST(ForwardMode, MakeDualOutsideLevelThrows) {
  Tensor x = tensor({1.0}, DType::Float64);
  error_message([&] { make_dual(x, x); }, ErrorKind::Autograd);
  DualLevel level;
  error_message([&] { make_dual(x, tensor({1.0, 2.0}, DType::Float64)); }, ErrorKind::Shape);
}

TEST(ForwardMode, NoPropagationAfterLevelEnds) {
  Tensor x = tensor({0.5}, DType::Float64);
  Tensor d;
  {
    DualLevel level;
    d = make_dual(x, tensor({1.0}, DType::Float64));
  }
  EXPECT_FALSE(is_forward_grad_enabled());
  EXPECT_FALSE(d.sin().tangent().defined());
}
