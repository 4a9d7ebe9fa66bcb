// checkpoint(): gradients equal those of the plain function bitwise (MLP, dropout through the
// default generator and through modules' own), backward recomputes once and does not advance
// random streams, nesting, retain_graph, and the runs where no region is needed.
#include <gtest/gtest.h>

#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "checkpoint/checkpoint_util.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_bitwise;
using adjoint::testing::grads_of;
using adjoint::testing::values_of;

namespace {

using Mlp = adjoint::testing::MlpWithInput;

Mlp make_mlp(DType dtype = DType::Float32) { return Mlp({6, 32, 32, 32, 4}, 8, 11, dtype); }

Tensor mlp_loss(const Tensor& y) { return Mlp::loss(y); }

TEST(Checkpoint, MlpGradientsEqualBitwise) {
  Mlp m = make_mlp();
  mlp_loss(m.net->forward(m.x)).backward();
  const auto plain = grads_of(m.leaves());
  for (Tensor& t : m.leaves()) t.zero_grad();

  reset_checkpoint_stats();
  Tensor y = checkpoint(
      [net = m.net](const std::vector<Tensor>& xs) { return net->forward(xs[0]); }, {m.x});
  EXPECT_EQ(checkpoint_stats().regions, 1);
  EXPECT_EQ(checkpoint_stats().recomputations, 0);
  mlp_loss(y).backward();
  EXPECT_EQ(checkpoint_stats().recomputations, 1);  // once, however many nodes unpack
  expect_bitwise(grads_of(m.leaves()), plain);
}

TEST(Checkpoint, TensorsOneByOneAndSeveralOutputs) {
  Tensor a = randn({3, 4}, DType::Float64).requires_grad_(true);
  Tensor b = randn({4, 2}, DType::Float64).requires_grad_(true);
  auto f = [](const Tensor& p, const Tensor& q) {
    Tensor h = tanh(matmul(p, q));
    return std::vector<Tensor>{h.sum(), (h * h).sum()};
  };
  auto plain = f(a, b);
  (plain[0] + plain[1] * 2).backward();
  const auto want = grads_of({a, b});
  a.zero_grad();
  b.zero_grad();
  std::vector<Tensor> outs = checkpoint(f, a, b);
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].item<double>(), plain[0].item<double>());
  (outs[0] + outs[1] * 2).backward();
  expect_bitwise(grads_of({a, b}), want);
}

TEST(Checkpoint, DropoutWithDefaultGeneratorRecomputesTheSameMask) {
  Mlp m = make_mlp();
  auto f = [net = m.net](const std::vector<Tensor>& xs) {
    return dropout(net->forward(dropout(xs[0], 0.3)), 0.5);
  };
  manual_seed(7);
  mlp_loss(f({m.x})).backward();
  const auto plain = grads_of(m.leaves());
  const Generator::State after_plain = default_generator().state();
  for (Tensor& t : m.leaves()) t.zero_grad();

  manual_seed(7);
  Tensor y = checkpoint(f, {m.x});
  mlp_loss(y).backward();
  expect_bitwise(grads_of(m.leaves()), plain);
  // The recomputation put the stream back: the next draws are those of the plain run.
  EXPECT_TRUE(adjoint::testing::same_state(default_generator().state(), after_plain));
}

TEST(Checkpoint, WithoutRngStateTheMaskDiffers) {
  // The control for the test above: the restore is what makes the masks agree.
  Mlp m = make_mlp();
  auto f = [net = m.net](const std::vector<Tensor>& xs) {
    return dropout(net->forward(xs[0]), 0.5);
  };
  manual_seed(7);
  mlp_loss(f({m.x})).backward();
  const auto plain = grads_of(m.leaves());
  for (Tensor& t : m.leaves()) t.zero_grad();
  manual_seed(7);
  CheckpointOptions no_rng;
  no_rng.preserve_rng_state = false;
  mlp_loss(checkpoint(f, {m.x}, no_rng)).backward();
  EXPECT_NE(grads_of(m.leaves()), plain);
}

TEST(Checkpoint, DropoutModulesUseTheirOwnGenerators) {
  Generator gen(5);
  auto net = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(6, 16, true, &gen), std::make_shared<nn::Dropout>(0.4, &gen),
      std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(16, 3, true, &gen),
      std::make_shared<nn::Dropout>(0.2, &gen)});
  Tensor x = randn({5, 6}, {}, &gen).requires_grad_(true);
  std::vector<Tensor> leaves = net->parameters();
  leaves.push_back(x);
  ASSERT_EQ(module_generators(*net).size(), 2u);
  adjoint::testing::GeneratorStates states(module_generators(*net));

  mlp_loss(net->forward(x)).backward();
  const auto plain = grads_of(leaves);
  for (Tensor& t : leaves) t.zero_grad();

  states.restore();
  mlp_loss(checkpoint(std::shared_ptr<nn::Module>(net), x)).backward();
  expect_bitwise(grads_of(leaves), plain);

  // Passing the generators by hand does the same for a plain callable.
  for (Tensor& t : leaves) t.zero_grad();
  states.restore();
  CheckpointOptions opts;
  opts.generators = module_generators(*net);
  mlp_loss(
      checkpoint([net](const std::vector<Tensor>& xs) { return net->forward(xs[0]); }, {x}, opts))
      .backward();
  expect_bitwise(grads_of(leaves), plain);
}

TEST(Checkpoint, NestedRegions) {
  Generator gen(3);
  Tensor x = randn({4, 5}, DType::Float64, &gen).requires_grad_(true);
  Tensor w1 = randn({5, 5}, DType::Float64, &gen).requires_grad_(true);
  Tensor w2 = randn({5, 5}, DType::Float64, &gen).requires_grad_(true);
  auto inner = [w2](const std::vector<Tensor>& hs) { return sin(matmul(hs[0], w2)) * hs[0]; };
  auto outer_plain = [&](const Tensor& v) {
    Tensor h = tanh(matmul(v, w1));
    return exp(inner({h}) * 0.5).sum();
  };
  outer_plain(x).backward();
  const auto want = grads_of({x, w1, w2});
  for (Tensor t : {x, w1, w2}) t.zero_grad();

  reset_checkpoint_stats();
  Tensor loss = checkpoint(
      [&](const std::vector<Tensor>& xs) {
        Tensor h = tanh(matmul(xs[0], w1));
        Tensor mid = checkpoint(inner, {h});
        // A region inside the inner one's function as well: three levels.
        return checkpoint([](const std::vector<Tensor>& ms) { return exp(ms[0] * 0.5).sum(); },
                          {mid});
      },
      {x});
  EXPECT_EQ(checkpoint_stats().regions, 3);
  loss.backward();
  expect_bitwise(grads_of({x, w1, w2}), want);
  // Each level recomputes once; the outer recomputation also reruns the inner regions' first
  // run (as PyTorch does), which only counts as new regions.
  EXPECT_EQ(checkpoint_stats().recomputations, 3);
}

TEST(Checkpoint, RetainGraphRecomputesForEachBackward) {
  Mlp m = make_mlp(DType::Float64);
  Tensor plain = mlp_loss(m.net->forward(m.x));
  plain.backward({}, true);
  plain.backward();
  const auto want = grads_of(m.leaves());
  for (Tensor& t : m.leaves()) t.zero_grad();

  reset_checkpoint_stats();
  Tensor loss = mlp_loss(checkpoint(
      [net = m.net](const std::vector<Tensor>& xs) { return net->forward(xs[0]); }, {m.x}));
  loss.backward({}, true);
  loss.backward();
  EXPECT_EQ(checkpoint_stats().recomputations, 2);
  expect_bitwise(grads_of(m.leaves()), want);
}

TEST(Checkpoint, NoRegionWithoutGradMode) {
  Tensor x = randn({3}).requires_grad_(true);
  reset_checkpoint_stats();
  Tensor y;
  {
    NoGradGuard no_grad;
    y = checkpoint([](const std::vector<Tensor>& xs) { return exp(xs[0]); }, {x});
  }
  EXPECT_EQ(checkpoint_stats().regions, 0);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.to_vector<double>(), exp(x).detach().to_vector<double>());
}

TEST(Checkpoint, InputsThatNeedNoGradient) {
  // Only a closed-over weight requires grad: the region still recomputes for it.
  Tensor x = randn({4, 3}, DType::Float64);
  Tensor w = randn({3, 2}, DType::Float64).requires_grad_(true);
  auto f = [w](const std::vector<Tensor>& xs) { return sigmoid(matmul(xs[0], w)).sum(); };
  f({x}).backward();
  const auto want = grads_of({w});
  w.zero_grad();
  checkpoint(f, {x}).backward();
  expect_bitwise(grads_of({w}), want);
}

}  // namespace

TEST(Checkpoint, AnEmptyInputRecomputesTheSameOps) {
  // Found by fuzz_ops: the recomputation saw the input through a view whose contiguity was
  // computed differently for an empty tensor, so contiguous() cloned there but not in the first
  // run, and the replay refused ("op 0 was linear but is now clone"). The oracle is the same
  // function without checkpoint.
  Tensor e = zeros({2, 1LL << 40, 0});
  Tensor w = tensor({0.5, 1.0, 2.0}, DType::Float64).requires_grad_(true);
  auto f = [](const std::vector<Tensor>& xs) {
    Tensor c = xs[0].contiguous();
    return std::vector<Tensor>{xs[1] * xs[1] + c.sum().to(DType::Float64)};
  };
  checkpoint(f, std::vector<Tensor>{e, w})[0].sum().backward();
  const std::vector<double> checkpointed = w.grad().to_vector<double>();
  w.zero_grad();
  f({e, w})[0].sum().backward();
  EXPECT_EQ(checkpointed, w.grad().to_vector<double>());
}
