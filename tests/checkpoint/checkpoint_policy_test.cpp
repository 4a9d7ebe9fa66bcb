// Selective checkpointing: a policy keeps the results of chosen ops, which the recomputation
// takes instead of running them. Keeps fewer tensors than a plain run saves, gives the same
// gradients bitwise, restores op state set in forward (cross_entropy's scale) and extra saved
// tensors (layer_norm's mean and rstd), and falls back to running an op whose kept result was
// modified in place.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "checkpoint/checkpoint_util.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::count_saved;
using adjoint::testing::expect_bitwise;
using adjoint::testing::grads_of;

namespace {

using Net = adjoint::testing::MlpWithInput;

Net make_net() { return Net({5, 24, 24, 24, 3}, 6, 2); }

TEST(CheckpointPolicy, SavesFewerTensorsWithEqualGradients) {
  Net n = make_net();
  const int plain_saved = count_saved([&] { n.loss(n.run({n.x})).backward(); });
  const auto want = grads_of(n.leaves());
  for (Tensor& t : n.leaves()) t.zero_grad();

  const int64_t kept_before = checkpoint_stats().kept_tensors;
  reset_checkpoint_stats();
  {
    Tensor y = checkpoint([n](const std::vector<Tensor>& xs) { return n.run(xs); }, {n.x},
                          save_ops({"linear"}));
    const int64_t kept = checkpoint_stats().kept_tensors - kept_before;
    EXPECT_EQ(kept, 4);  // one output per Linear layer
    EXPECT_GT(plain_saved, kept);
    n.loss(y).backward();
  }
  EXPECT_EQ(checkpoint_stats().recomputations, 1);
  EXPECT_EQ(checkpoint_stats().replayed_ops, 4);            // the linears were not run again
  EXPECT_EQ(checkpoint_stats().kept_tensors, kept_before);  // freed with the graph
  expect_bitwise(grads_of(n.leaves()), want);
}

TEST(CheckpointPolicy, WithoutPolicyNothingIsKept) {
  Net n = make_net();
  const int64_t before = checkpoint_stats().kept_tensors;
  Tensor y = checkpoint([n](const std::vector<Tensor>& xs) { return n.run(xs); }, {n.x});
  EXPECT_EQ(checkpoint_stats().kept_tensors, before);
  n.loss(y).backward();
}

TEST(CheckpointPolicy, PolicySeesEveryOpOfTheFirstRunOnly) {
  Net n = make_net();
  std::set<std::string> seen;
  int calls = 0;
  CheckpointPolicy record = [&](std::string_view op, const Tensor& out) {
    seen.insert(std::string(op));
    ++calls;
    EXPECT_FALSE(out.requires_grad());  // the bare result, before it joins the graph
    return CheckpointAction::Recompute;
  };
  Tensor y = checkpoint([n](const std::vector<Tensor>& xs) { return n.run(xs); }, {n.x}, record);
  const int first_run = calls;
  EXPECT_TRUE(seen.count("linear"));
  EXPECT_TRUE(seen.count("gelu"));
  n.loss(y).backward();
  EXPECT_EQ(calls, first_run);
}

TEST(CheckpointPolicy, SavingEverythingReplaysEverything) {
  Net n = make_net();
  n.loss(n.run({n.x})).backward();
  const auto want = grads_of(n.leaves());
  for (Tensor& t : n.leaves()) t.zero_grad();
  reset_checkpoint_stats();
  Tensor y = checkpoint([n](const std::vector<Tensor>& xs) { return n.run(xs); }, {n.x},
                        [](std::string_view, const Tensor&) { return CheckpointAction::Save; });
  n.loss(y).backward();
  EXPECT_EQ(checkpoint_stats().replayed_ops, 7);  // 4 linear + 3 gelu: nothing ran again
  expect_bitwise(grads_of(n.leaves()), want);
}

TEST(CheckpointPolicy, OpStateAndExtraTensorsAreReplayed) {
  // cross_entropy sets its mean's scale in forward; layer_norm saves mean and rstd.
  Generator gen(9);
  Tensor x = randn({6, 8}, DType::Float64, &gen).requires_grad_(true);
  Tensor w = randn({8, 5}, DType::Float64, &gen).requires_grad_(true);
  Tensor gamma = ones({8}, DType::Float64).requires_grad_(true);
  Tensor target = randint(0, 5, {6}, &gen);
  auto f = [=](const std::vector<Tensor>& xs) {
    Tensor h = layer_norm(xs[0], {8}, gamma, Tensor());
    return cross_entropy(matmul(h, w), target);
  };
  f({x}).backward();
  const auto want = grads_of({x, w, gamma});
  for (Tensor t : {x, w, gamma}) t.zero_grad();
  reset_checkpoint_stats();
  checkpoint(f, {x}, save_ops({"layer_norm", "cross_entropy"})).backward();
  EXPECT_EQ(checkpoint_stats().replayed_ops, 2);
  expect_bitwise(grads_of({x, w, gamma}), want);
}

TEST(CheckpointPolicy, KeptResultModifiedInPlaceIsRecomputed) {
  Generator gen(6);
  Tensor x = randn({3, 4}, DType::Float64, &gen).requires_grad_(true);
  Tensor w = randn({4, 4}, DType::Float64, &gen).requires_grad_(true);
  auto f = [w](const std::vector<Tensor>& xs) {
    Tensor m = matmul(xs[0], w);
    m.mul_(2.0);  // the kept matmul result is no longer matmul's result
    return tanh(m).sum();
  };
  f({x}).backward();
  const auto want = grads_of({x, w});
  x.zero_grad();
  w.zero_grad();
  reset_checkpoint_stats();
  checkpoint(f, {x}, save_ops({"matmul"})).backward();
  EXPECT_EQ(checkpoint_stats().replayed_ops, 0);
  expect_bitwise(grads_of({x, w}), want);
}

}  // namespace
