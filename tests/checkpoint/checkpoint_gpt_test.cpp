// Checkpointing a small GPT with dropout on: one block, every block (the GPT forward written
// out with checkpoint_sequential over model.blocks), and a block under a selective policy.
// Loss and gradients equal the plain model's bitwise.
#include <gtest/gtest.h>

#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "checkpoint/checkpoint_util.h"

using namespace adjoint;
using adjoint::testing::count_saved;
using adjoint::testing::expect_bitwise;
using adjoint::testing::GeneratorStates;
using adjoint::testing::grads_of;

namespace {

constexpr nn::GPTConfig kConfig{/*vocab=*/13, /*context=*/6,  /*d_model=*/16, /*heads=*/2,
                                /*layers=*/3, /*dropout=*/0.1};

// GPT::forward and GPT::loss with the blocks run by checkpoint_sequential.
Tensor checkpointed_loss(nn::GPT& m, const Tensor& idx, const Tensor& targets, int64_t segments) {
  const int64_t T = idx.size(1);
  Tensor x = m.drop->forward(m.wte->forward(idx) + m.wpe->weight.narrow(0, 0, T));
  x = m.ln_f->forward(checkpoint_sequential(*m.blocks, segments, x));
  Tensor logits = linear(x, m.wte->weight);
  return cross_entropy(logits.reshape({-1, kConfig.vocab}), targets.reshape({-1}));
}

struct Fixture {
  Generator gen{17};
  nn::GPT model{kConfig, &gen};
  Tensor idx = randint(0, kConfig.vocab, {2, 5}, &gen);
  Tensor targets = randint(0, kConfig.vocab, {2, 5}, &gen);
};

TEST(CheckpointGpt, OneBlockWithDropout) {
  Fixture f;
  auto block = f.model.blocks->at<nn::Block>(1);
  Tensor x = randn({2, 5, kConfig.d_model}, {}, &f.gen).requires_grad_(true);
  Tensor w = randn({2, 5, kConfig.d_model}, {}, &f.gen);
  std::vector<Tensor> leaves = block->parameters();
  leaves.push_back(x);
  GeneratorStates states(module_generators(*block));

  (block->forward(x) * w).sum().backward();
  const auto want = grads_of(leaves);
  for (Tensor& t : leaves) t.zero_grad();

  states.restore();
  (checkpoint(block, x) * w).sum().backward();  // a shared_ptr<nn::Block>
  expect_bitwise(grads_of(leaves), want);
}

TEST(CheckpointGpt, EveryBlockWithDropout) {
  Fixture f;
  const std::vector<Tensor> params = f.model.parameters();
  GeneratorStates states(module_generators(f.model));
  Tensor plain = f.model.loss(f.idx, f.targets);
  plain.backward();
  const auto want = grads_of(params);
  f.model.zero_grad();

  for (int64_t segments : {3, 2}) {  // each block alone, then blocks 0-1 together
    states.restore();
    reset_checkpoint_stats();
    Tensor loss = checkpointed_loss(f.model, f.idx, f.targets, segments);
    EXPECT_EQ(checkpoint_stats().regions, segments - 1);
    EXPECT_EQ(loss.item<double>(), plain.item<double>());
    loss.backward();
    EXPECT_EQ(checkpoint_stats().recomputations, segments - 1);
    expect_bitwise(grads_of(params), want);
    f.model.zero_grad();
  }
}

TEST(CheckpointGpt, BlockUnderSelectivePolicy) {
  Fixture f;
  auto block = f.model.blocks->at<nn::Block>(0);
  Tensor x = randn({2, 5, kConfig.d_model}, {}, &f.gen).requires_grad_(true);
  std::vector<Tensor> leaves = block->parameters();
  leaves.push_back(x);
  GeneratorStates states(module_generators(*block));

  const int plain_saved = count_saved([&] { block->forward(x).square().sum().backward(); });
  const auto want = grads_of(leaves);
  for (Tensor& t : leaves) t.zero_grad();

  states.restore();
  CheckpointOptions opts;
  opts.generators = module_generators(*block);
  opts.policy = save_ops({"linear", "matmul"});
  const int64_t before = checkpoint_stats().kept_tensors;
  reset_checkpoint_stats();
  Tensor y = checkpoint([block](const std::vector<Tensor>& xs) { return block->forward(xs[0]); },
                        {x}, opts);
  const int64_t kept = checkpoint_stats().kept_tensors - before;
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, plain_saved);
  y.square().sum().backward();
  EXPECT_GT(checkpoint_stats().replayed_ops, 0);
  expect_bitwise(grads_of(leaves), want);
}

}  // namespace
