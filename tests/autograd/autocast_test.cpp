// Autocast: the dtype each op runs in under the policy, nesting and the disabling guard, the
// per-guard cast cache, and gradients. The oracle of an autocast run is the same program with
// the casts written out by hand (bitwise equal), and float32 within bfloat16's tolerance.
#include <gtest/gtest.h>

#include <cmath>

#include "adjoint/adjoint.h"
#include "adjoint/memory.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {

constexpr DType kBF16 = DType::BFloat16, kF16 = DType::Float16, kF32 = DType::Float32;

Tensor param(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, kF32, &g).requires_grad_();
}

// Bitwise equality of two tensors of one dtype, through float64 (exact for every dtype here).
void expect_same(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  std::vector<double> g = got.to(DType::Float64).to_vector<double>();
  std::vector<double> w = want.to(DType::Float64).to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], w[i]) << "element " << i;
}

double max_abs(const Tensor& t) { return t.abs().max().to(DType::Float64).item<double>(); }

TEST(Autocast, PolicyPicksEachOpsDtype) {
  Tensor a = param({4, 8}, 1), b = param({8, 3}, 2), w = param({3, 8}, 3), bias = param({3}, 4);
  {
    Autocast amp(kBF16);
    EXPECT_TRUE(is_autocast_enabled());
    EXPECT_EQ(autocast_dtype(), kBF16);
    // Matrix products in the low dtype.
    Tensor m = matmul(a, b);
    EXPECT_EQ(m.dtype(), kBF16);
    EXPECT_EQ(linear(a, w, bias).dtype(), kBF16);
    // Range and precision in float32, the rest following their inputs.
    EXPECT_EQ(relu(m).dtype(), kBF16);
    EXPECT_EQ(softmax(m, -1).dtype(), kF32);
    EXPECT_EQ(log_softmax(m, -1).dtype(), kF32);
    EXPECT_EQ(sum(m).dtype(), kF32);
    EXPECT_EQ(exp(m).dtype(), kF32);
    EXPECT_EQ(mse_loss(m, zeros({4, 3}, kBF16)).dtype(), kF32);
    EXPECT_EQ((m + zeros({4, 3}, kF32)).dtype(), kF32);  // promotion as without autocast
    // float64 stays float64: autocast is for float32 programs.
    Tensor d = randn({2, 2}, DType::Float64);
    EXPECT_EQ(matmul(d, d).dtype(), DType::Float64);
  }
  EXPECT_FALSE(is_autocast_enabled());
  EXPECT_EQ(matmul(a, b).dtype(), kF32);
}

TEST(Autocast, ValuesAreThoseOfTheCastsWrittenOut) {
  Tensor a = param({5, 16}, 5), w = param({7, 16}, 6), bias = param({7}, 7);
  for (DType low : {kBF16, kF16}) {
    Tensor got;
    {
      Autocast amp(low);
      got = softmax(linear(a, w, bias), -1);
    }
    Tensor want = softmax(linear(a.to(low), w.to(low), bias.to(low)).to(kF32), -1);
    expect_same(got, want);
  }
}

TEST(Autocast, NestsAndTheDisablingGuardRunsFloat32) {
  Tensor a = param({2, 3}, 8), b = param({3, 2}, 9);
  Autocast outer(kBF16);
  {
    Autocast off(kBF16, false);
    EXPECT_FALSE(is_autocast_enabled());
    EXPECT_EQ(matmul(a, b).dtype(), kF32);
    {
      Autocast half(kF16);
      EXPECT_EQ(matmul(a, b).dtype(), kF16);
    }
    EXPECT_EQ(matmul(a, b).dtype(), kF32);
  }
  EXPECT_EQ(matmul(a, b).dtype(), kBF16);
}

TEST(Autocast, RefusesDtypesThatAreNotLowPrecisionFloats) {
  expect_error([] { Autocast amp(DType::Float32); }, ErrorKind::DType,
               {"Autocast", "float16 or bfloat16", "float32"});
  expect_error([] { Autocast amp(DType::Int64); }, ErrorKind::DType, {"Autocast", "int64"});
  EXPECT_FALSE(is_autocast_enabled());  // a refused guard leaves the state as it was
}

TEST(Autocast, ParametersAreCastOncePerGuardAndReused) {
  Tensor w = param({4, 4}, 10), x = param({3, 4}, 11);
  Tensor x_const = x.detach();
  {
    Autocast amp(kBF16);
    Tensor h1 = matmul(x_const, w);
    Tensor h2 = matmul(h1.to(kF32), w);  // the same parameter again
    EXPECT_EQ(autocast_cache_size(), 1u);
    // Both matmuls consumed one cast node: the graph has a single "to" from w.
    auto n1 = h1.grad_fn(), n2 = h2.grad_fn();
    ASSERT_TRUE(n1 && n2);
    EXPECT_EQ(n1->next_edges()[1].node, n2->next_edges()[1].node);
    // Activations (not leaves) are never cached; neither is a leaf that needs no grad.
    matmul(h1.to(kF32), x_const.t());
    EXPECT_EQ(autocast_cache_size(), 1u);
    // An in-place update inside the guard makes a fresh cast.
    {
      NoGradGuard no_grad;
      w.mul_(2.0);
    }
    Tensor h3 = matmul(x_const, w);
    EXPECT_NE(h3.grad_fn()->next_edges()[1].node, n1->next_edges()[1].node);
    expect_same(h3, matmul(x_const.to(kBF16), w.detach().to(kBF16)));
  }
  EXPECT_EQ(autocast_cache_size(), 0u);  // dropped with the outermost guard
}

// A parameter made by detach().requires_grad_() shares its storage with the tensor it came
// from; it is a leaf all the same and is cached, as in PyTorch. A write through the other alias
// bumps the shared storage's version, so the next use casts the new values.
TEST(Autocast, ADetachedParameterIsCachedAndSeesWritesThroughItsAlias) {
  Generator g(14);
  Tensor base = randn({4, 4}, kF32, &g);
  Tensor w = base.detach().requires_grad_();
  Tensor x = param({3, 4}, 15).detach();
  Autocast amp(kBF16);
  Tensor h1 = matmul(x, w), h2 = matmul(x, w);
  EXPECT_EQ(autocast_cache_size(), 1u);
  EXPECT_EQ(h1.grad_fn()->next_edges()[1].node, h2.grad_fn()->next_edges()[1].node);
  base.mul_(2.0);  // through the alias
  Tensor h3 = matmul(x, w);
  EXPECT_NE(h3.grad_fn()->next_edges()[1].node, h1.grad_fn()->next_edges()[1].node);
  expect_same(h3, matmul(x.to(kBF16), base.to(kBF16)));
}

TEST(Autocast, ACastMadeWithoutGradIsNotReusedWithGrad) {
  Tensor w = param({4, 4}, 12), x = param({2, 4}, 13).detach();
  Autocast amp(kBF16);
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(matmul(x, w).requires_grad());
  }
  Tensor y = matmul(x, w);
  ASSERT_TRUE(y.requires_grad());
  sum(y).backward();
  ASSERT_TRUE(w.grad().defined());
  // d sum(x w) / dw = xᵀ 1, with x rounded to bfloat16 as the matmul saw it.
  Tensor want = matmul(x.to(kBF16).to(kF32).t(), ones({2, 4}));
  EXPECT_LT(max_abs(w.grad() - want), 1e-2 * (1 + max_abs(want)));
}

// A two-layer MLP with a loss: parameters float32, hidden products in the low dtype.
Tensor mlp_loss(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                const Tensor& b2, const Tensor& target) {
  Tensor h = relu(linear(x, w1, b1));
  return cross_entropy(linear(h, w2, b2), target);
}

TEST(Autocast, GradientsAreFloat32AndMatchTheCastsWrittenOut) {
  Generator g(14);
  Tensor x = randn({16, 12}, kF32, &g);
  Tensor target = randint(0, 5, {16}, &g);
  Tensor w1 = param({32, 12}, 15), b1 = param({32}, 16), w2 = param({5, 32}, 17),
         b2 = param({5}, 18);
  std::vector<Tensor> ps{w1, b1, w2, b2};

  Tensor loss;
  {
    Autocast amp(kBF16);
    loss = mlp_loss(x, w1, b1, w2, b2, target);
  }
  EXPECT_EQ(loss.dtype(), kF32);
  loss.backward();
  std::vector<Tensor> amp_grads;
  for (Tensor& p : ps) {
    ASSERT_EQ(p.grad().dtype(), kF32);
    amp_grads.push_back(p.grad().clone());
    p.zero_grad();
  }

  // The oracle: the same program with every autocast cast written by hand.
  auto low = [](const Tensor& t) { return t.to(kBF16); };
  Tensor h = relu(linear(low(x), low(w1), low(b1)));
  Tensor manual = cross_entropy(linear(h, low(w2), low(b2)).to(kF32), target);
  manual.backward();
  expect_same(loss, manual);
  for (std::size_t i = 0; i < ps.size(); ++i) expect_same(amp_grads[i], ps[i].grad());

  // And float32 within bfloat16's tolerance (8 bits of significand: relative 2^-8 per
  // rounding, a few roundings deep).
  for (Tensor& p : ps) p.zero_grad();
  Tensor exact = mlp_loss(x, w1, b1, w2, b2, target);
  exact.backward();
  EXPECT_NEAR(loss.item<float>(), exact.item<float>(), 0.05 * std::abs(exact.item<float>()));
  for (std::size_t i = 0; i < ps.size(); ++i)
    EXPECT_LT(max_abs(amp_grads[i] - ps[i].grad()), 0.05 * (max_abs(ps[i].grad()) + 1e-3))
        << "parameter " << i;
}

TEST(Autocast, BackwardInsideTheGuardRunsEachOpInItsForwardDtype) {
  Tensor w = param({6, 6}, 19), x = param({4, 6}, 20);
  Tensor outside_grad;
  for (bool inside : {false, true}) {
    w.zero_grad();
    Autocast amp(kBF16);
    Tensor loss = sum(softmax(matmul(x.detach(), w), -1) * arange(6).to(kF32));
    if (inside) {
      loss.backward();
      expect_same(w.grad(), outside_grad);
    } else {
      Autocast off(kBF16, false);
      loss.backward();
      outside_grad = w.grad().clone();
    }
  }
}

TEST(Autocast, CheckpointRecomputesUnderTheFirstRunsDtypes) {
  Tensor w1 = param({8, 8}, 21), w2 = param({8, 8}, 22), x = param({4, 8}, 23).detach();
  auto block = [&](const Tensor& t) { return relu(matmul(relu(matmul(t, w1)), w2)); };
  Tensor plain_grad;
  for (bool ckpt : {false, true}) {
    w1.zero_grad();
    Tensor loss;
    {
      Autocast amp(kBF16);
      Tensor y = ckpt ? checkpoint(block, x) : block(x);
      loss = sum(y);
    }
    loss.backward();  // outside the guard: the recomputation must still run in bfloat16
    if (!ckpt)
      plain_grad = w1.grad().clone();
    else
      expect_same(w1.grad(), plain_grad);
  }
}

TEST(Autocast, SavedActivationsOfLowPrecisionOpsTakeHalfTheBytes) {
  // A deep narrow MLP (the deep-mlp workload's shape): what its graph holds for backward.
  Generator g(24);
  const int layers = 6, width = 256, batch = 512;
  std::vector<Tensor> ws;
  for (int i = 0; i < layers; ++i) ws.push_back(param({width, width}, 100 + i));
  Tensor x = randn({batch, width}, kF32, &g);
  auto summary = [&](bool amp_on) {
    std::optional<Autocast> amp;
    if (amp_on) amp.emplace(kBF16);
    Tensor h = x;
    for (const Tensor& w : ws) h = relu(linear(h, w));
    return saved_tensors_summary(h);
  };
  const SavedTensorsSummary f32 = summary(false), bf16 = summary(true);
  // float32: the parameters are saved as themselves (leaves, no extra memory). Under autocast
  // their bfloat16 casts are saved instead: half the parameters' bytes, as in PyTorch.
  const std::size_t param_bytes = static_cast<std::size_t>(layers) * width * width * 4;
  const std::size_t act32 = f32.total_bytes - f32.leaf_bytes;
  const std::size_t act16 = bf16.total_bytes - bf16.leaf_bytes - param_bytes / 2;
  ASSERT_GT(act32, 0u);
  EXPECT_EQ(act16 * 2, act32) << f32 << bf16;  // every saved activation in half the bytes
  for (const SavedNodeInfo& n : bf16.nodes)
    for (const SavedTensorInfo& t : n.saved) EXPECT_EQ(t.dtype, kBF16) << n.name;
}

}  // namespace
