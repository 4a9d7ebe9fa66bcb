// checkpoint_sequential: the segment plan (ceil(sqrt(L)) by default, balanced), gradients equal
// to the plain chain bitwise for a list of callables and for nn::Sequential with dropout, and
// one region per segment but the last.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "checkpoint/checkpoint_util.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_bitwise;
using adjoint::testing::expect_error;
using adjoint::testing::grads_of;

namespace {

using Plan = std::vector<std::pair<std::size_t, std::size_t>>;

TEST(CheckpointSequential, DefaultSegmentsAreCeilSqrt) {
  for (std::size_t layers : {1u, 2u, 4u, 5u, 9u, 10u, 16u, 17u, 100u}) {
    const Plan plan = checkpoint_segments(layers);
    const auto want = static_cast<std::size_t>(std::ceil(std::sqrt(double(layers))));
    EXPECT_EQ(plan.size(), want) << layers << " layers";
    // Contiguous, covering, sizes differing by at most one, longer ones first.
    std::size_t next = 0, prev_size = layers;
    for (const auto& [b, e] : plan) {
      EXPECT_EQ(b, next);
      EXPECT_LE(e - b, prev_size);
      EXPECT_GE(e - b, layers / plan.size());
      prev_size = e - b;
      next = e;
    }
    EXPECT_EQ(next, layers);
  }
  EXPECT_EQ(checkpoint_segments(10), (Plan{{0, 3}, {3, 6}, {6, 8}, {8, 10}}));
  EXPECT_EQ(checkpoint_segments(10, 3), (Plan{{0, 4}, {4, 7}, {7, 10}}));
  EXPECT_EQ(checkpoint_segments(3, 8), (Plan{{0, 1}, {1, 2}, {2, 3}}));  // at most one per layer
  EXPECT_TRUE(checkpoint_segments(0).empty());
  expect_error([] { checkpoint_segments(4, -1); }, ErrorKind::Value,
               {"checkpoint_sequential", "segments", "-1"});
}

struct Chain {
  std::vector<Tensor> weights;
  std::vector<CheckpointLayer> layers;
  Tensor x;
};

Chain make_chain(std::size_t n) {
  Generator gen(4);
  Chain c;
  for (std::size_t i = 0; i < n; ++i) {
    Tensor w = (randn({8, 8}, DType::Float64, &gen) * 0.4).requires_grad_(true);
    c.weights.push_back(w);
    c.layers.push_back([w](const Tensor& h) { return tanh(matmul(h, w)) + h; });
  }
  c.x = randn({3, 8}, DType::Float64, &gen).requires_grad_(true);
  return c;
}

TEST(CheckpointSequential, CallablesEqualThePlainChain) {
  Chain c = make_chain(9);
  std::vector<Tensor> leaves = c.weights;
  leaves.push_back(c.x);
  Tensor h = c.x;
  for (const auto& layer : c.layers) h = layer(h);
  const double plain_loss = (h * h).sum().item<double>();
  (h * h).sum().backward();
  const auto want = grads_of(leaves);
  for (Tensor& t : leaves) t.zero_grad();

  reset_checkpoint_stats();
  Tensor y = checkpoint_sequential(c.layers, c.x);  // 3 segments of 3
  EXPECT_EQ(checkpoint_stats().regions, 2);         // the last one is not checkpointed
  EXPECT_EQ((y * y).sum().item<double>(), plain_loss);
  (y * y).sum().backward();
  EXPECT_EQ(checkpoint_stats().recomputations, 2);
  expect_bitwise(grads_of(leaves), want);
}

TEST(CheckpointSequential, SegmentCounts) {
  Chain c = make_chain(6);
  for (int64_t segments : {1, 2, 3, 6, 10}) {
    reset_checkpoint_stats();
    checkpoint_sequential(c.layers, segments, c.x).sum().backward();
    const int64_t used = std::min<int64_t>(segments, 6);
    EXPECT_EQ(checkpoint_stats().regions, used - 1) << segments;
    EXPECT_EQ(checkpoint_stats().recomputations, used - 1) << segments;
  }
  // The layers are copied: the temporary list may die before backward.
  Tensor y = checkpoint_sequential(make_chain(4).layers, 2, c.x);
  y.sum().backward();
}

TEST(CheckpointSequential, SequentialModuleWithDropout) {
  Generator gen(8);
  auto net = std::make_shared<nn::Sequential>();
  for (int i = 0; i < 5; ++i) {
    net->push_back(std::make_shared<nn::Linear>(12, 12, true, &gen));
    net->push_back(std::make_shared<nn::GELU>());
    net->push_back(std::make_shared<nn::Dropout>(0.25, &gen));
  }
  Tensor x = randn({4, 12}, {}, &gen).requires_grad_(true);
  std::vector<Tensor> leaves = net->parameters();
  leaves.push_back(x);
  adjoint::testing::GeneratorStates states(module_generators(*net));

  Tensor plain = net->forward(x);
  adjoint::testing::GeneratorStates after_forward(module_generators(*net));
  (plain * plain).mean().backward();
  const auto want = grads_of(leaves);
  for (Tensor& t : leaves) t.zero_grad();

  states.restore();
  reset_checkpoint_stats();
  Tensor y = checkpoint_sequential(*net, x);  // 15 modules: 4 segments
  EXPECT_EQ(checkpoint_stats().regions, 3);
  (y * y).mean().backward();
  expect_bitwise(grads_of(leaves), want);
  // The recomputation left the dropout streams where the forward put them.
  for (const auto& [g, s] : after_forward.states)
    EXPECT_TRUE(adjoint::testing::same_state(g->state(), s));
}

}  // namespace
