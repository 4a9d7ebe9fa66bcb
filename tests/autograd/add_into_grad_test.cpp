// linear's VJP adding the weight gradient straight into an existing .grad (Note [Adding into
// .grad in place], src/autograd/accumulate_grad.cpp). The oracle is the gradient that
// autograd::grad returns for the same loss (grad() never takes the shortcut). Each case where
// the shortcut must stay off (hooks, fan-in, grad(), create_graph, no .grad yet) is checked
// for the right values; the allocator's peak shows when the shortcut was taken, since it never
// materialises dW.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "adjoint/adjoint.h"

using namespace adjoint;

namespace {

struct Problem {
  Tensor x, w, b, r;
  explicit Problem(int64_t rows = 3, int64_t in = 4, int64_t out = 5,
                   DType dtype = DType::Float64) {
    Generator gen(11);
    x = randn({rows, in}, dtype, &gen);
    w = randn({out, in}, dtype, &gen).requires_grad_(true);
    b = randn({out}, dtype, &gen).requires_grad_(true);
    r = randn({rows, out}, dtype, &gen);
  }
  Tensor loss() const { return (linear(x, w, b) * r).sum(); }
  Tensor reference() const { return autograd::grad({loss()}, {w})[0]; }
};

// The most bytes a backward of `loss` holds beyond what was allocated before it.
std::size_t backward_growth(const Tensor& loss) {
  const std::size_t before = memory_stats().current_bytes;
  reset_peak_memory_stats();
  loss.backward();
  return memory_stats().peak_bytes - before;
}

void expect_equal(const Tensor& got, const Tensor& want, double factor = 1) {
  const std::vector<double> g = got.to_vector<double>(), e = want.to_vector<double>();
  ASSERT_EQ(g.size(), e.size());
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], factor * e[i]) << "at " << i;
}

}  // namespace

TEST(AddIntoGrad, ZeroedGradReceivesExactlyTheGradientInPlace) {
  Problem p;
  const Tensor want = p.reference();
  p.loss().backward();
  p.w.zero_grad(/*set_to_none=*/false);
  const Tensor held = p.w.grad();  // the same storage must receive the next gradient
  const auto version = held.version();
  p.loss().backward();
  EXPECT_TRUE(p.w.grad().shares_storage(held));
  EXPECT_GT(held.version(), version);
  expect_equal(held, want);
}

TEST(AddIntoGrad, AccumulatesAcrossBackwardCalls) {
  Problem p;
  const Tensor want = p.reference();
  for (int i = 0; i < 3; ++i) p.loss().backward();
  expect_equal(p.w.grad(), want, 3);  // g + g + g, exact in float64 for these values
  expect_equal(p.b.grad(), autograd::grad({p.loss()}, {p.b})[0], 3);
}

TEST(AddIntoGrad, SkipsTheDwBufferWhenItApplies) {
  // A 512 x 512 float32 weight and one input row: dW (1 MiB) dominates backward's memory.
  Problem p(1, 512, 512, DType::Float32);
  p.loss().backward();
  p.w.zero_grad(false);
  const std::size_t dw_bytes = 512 * 512 * 4;
  EXPECT_LT(backward_growth(p.loss()), dw_bytes / 2) << "dW was materialised";
  // With a hook on the weight the gradient must exist as a tensor for the hook to see.
  int calls = 0;
  p.w.register_hook([&](const Tensor& g) {
    ++calls;
    return g;
  });
  EXPECT_GE(backward_growth(p.loss()), dw_bytes);
  EXPECT_EQ(calls, 1);
}

TEST(AddIntoGrad, HooksStillSeeAndReplaceTheGradient) {
  Problem p;
  const Tensor want = p.reference();
  p.loss().backward();
  p.w.zero_grad(false);
  Tensor seen;
  p.w.register_hook([&](const Tensor& g) {
    seen = g.clone();
    return g * 2;
  });
  p.loss().backward();
  expect_equal(seen, want);
  expect_equal(p.w.grad(), want, 2);
}

TEST(AddIntoGrad, WeightUsedTwiceGetsTheSum) {
  Problem p;
  auto loss2 = [&] { return p.loss() + (linear(p.x * 3, p.w) * p.r).sum(); };
  const Tensor want = autograd::grad({loss2()}, {p.w})[0];
  loss2().backward();
  p.w.zero_grad(false);
  loss2().backward();
  const std::vector<double> g = p.w.grad().to_vector<double>(), e = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], e[i], 1e-12) << "at " << i;
}

TEST(AddIntoGrad, GradLeavesDotGradAlone) {
  Problem p;
  p.loss().backward();
  const Tensor before = p.w.grad().clone();
  const Tensor g = autograd::grad({p.loss()}, {p.w})[0];
  expect_equal(p.w.grad(), before);
  expect_equal(g, before);
}

TEST(AddIntoGrad, CreateGraphKeepsADifferentiableGrad) {
  Problem p;
  p.loss().backward();
  p.w.zero_grad(false);
  Tensor loss = (linear(p.x, p.w, p.b).square() * p.r).sum();
  autograd::backward({loss}, {}, /*retain_graph=*/true, /*create_graph=*/true);
  ASSERT_TRUE(p.w.grad().requires_grad()) << "create_graph must record the gradient";
  // d/dw of sum(w.grad * w) through the recorded gradient is finite and defined
  Tensor second = autograd::grad({(p.w.grad() * p.w).sum()}, {p.w})[0];
  EXPECT_TRUE(second.defined());
  // A recorded .grad points back at its own leaf (the reference cycle PyTorch warns about for
  // backward with create_graph): drop it.
  p.w.zero_grad(true);
  p.b.zero_grad(true);
}

TEST(AddIntoGrad, NoGradYetTakesTheIncomingBuffer) {
  Problem p;
  const Tensor want = p.reference();
  p.loss().backward();  // .grad undefined before: AccumulateGrad's own path
  expect_equal(p.w.grad(), want);
}

TEST(AddIntoGrad, AGradientOfAnotherDtypeTakesTheUsualPath) {
  // A float64 seed for a float32 layer: matmul promotes, and the weight still gets a float32
  // gradient added into its .grad.
  Problem p(3, 4, 5, DType::Float32);
  p.loss().backward();
  p.w.zero_grad(false);
  const Tensor y = linear(p.x, p.w, p.b);
  autograd::backward({y}, {p.r.to(DType::Float64)});
  EXPECT_EQ(p.w.grad().dtype(), DType::Float32);
  const std::vector<double> got = p.w.grad().to_vector<double>();
  const std::vector<double> want = p.reference().to_vector<double>();
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "at " << i;
}

// Under autocast the weight reaches linear as its 16-bit cast, and the VJP adds the widened
// 16-bit gᵀx into the float32 .grad through the cast (Note [Adding into .grad through a
// cast]). The oracle: autograd::grad, which never takes the shortcut, through the same cast.
// The second shape crosses the sgemm path's tiles of dW (Note [Widened products added in tiles]):
// 300 rows and 1100 columns against tiles of 256 x 1024.
TEST(AddIntoGrad, ThroughAnAutocastCastTheGradGetsTheWidened16BitProduct) {
  for (auto [rows, in, out] : {std::array<int64_t, 3>{6, 96, 80}, {5, 1100, 300}})
    for (DType low : {DType::BFloat16, DType::Float16}) {
      Problem p(rows, in, out, DType::Float32);
      auto loss = [&] {
        Tensor y;
        {
          Autocast amp(low);
          y = linear(p.x, p.w, p.b);
        }
        return (y.to(DType::Float32) * p.r).sum();
      };
      const Tensor want = autograd::grad({loss()}, {p.w})[0];
      ASSERT_EQ(want.dtype(), DType::Float32);
      loss().backward();  // no .grad yet: the usual way
      expect_equal(p.w.grad(), want);
      const Tensor held = p.w.grad();
      const Tensor twice = (held + want).detach();  // what AccumulateGrad's add would give
      const auto version = held.version();
      loss().backward();
      EXPECT_TRUE(p.w.grad().shares_storage(held)) << low;
      EXPECT_GT(held.version(), version) << low;
      expect_equal(held, twice);
    }
}

TEST(AddIntoGrad, ThroughACastSkipsTheWidenedCopy) {
  // One input row and a 512 x 512 weight: dW dominates backward's memory. The usual way holds
  // the float32 product and its 16-bit rounding (4 + 2 bytes an element), then the rounding and
  // its float32 widening (2 + 4); the shortcut holds at most the float32 product (4; on the
  // sgemm path only a tile of it).
  Problem p(1, 512, 512, DType::Float32);
  auto loss = [&] {
    Tensor y;
    {
      Autocast amp(DType::BFloat16);
      y = linear(p.x, p.w, p.b);
    }
    return (y.to(DType::Float32) * p.r).sum();
  };
  loss().backward();
  p.w.zero_grad(false);
  const std::size_t n = 512 * 512;
  EXPECT_LT(backward_growth(loss()), 9 * n / 2) << "the widened dW was materialised";
  // A hook on the weight must see the gradient as a tensor: the usual way.
  int calls = 0;
  p.w.register_hook([&](const Tensor& g) {
    ++calls;
    return g;
  });
  EXPECT_GE(backward_growth(loss()), 11 * n / 2);
  EXPECT_EQ(calls, 1);
}
