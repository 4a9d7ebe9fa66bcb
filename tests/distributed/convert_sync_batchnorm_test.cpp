// nn::convert_sync_batchnorm: a small conv net whose BatchNorm2d sit both in a Sequential and in
// a typed member, converted and trained for a few SGD steps on each rank's share of a batch,
// against the same net unconverted in one process on the whole batch (float64 within 1e-12);
// and, on one rank, what the conversion keeps (state_dict keys and tensors, configuration,
// training flag), what it leaves alone, and replace_module's errors. Labels unit and mpi.
#include <gtest/gtest.h>

#include <string>

#include "adjoint/distributed/sync_batchnorm.h"
#include "distributed/dist_support.h"

namespace adjoint::testing {
namespace {

// conv -> bn (typed member) -> relu -> [conv, bn, relu] (a Sequential) -> mean over H, W.
struct Net : nn::Module {
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Sequential> block;
  explicit Net(uint64_t seed) : Module("Net") {
    Generator gen(seed);
    conv = register_module("conv", std::make_shared<nn::Conv2d>(2, 4, 3, 1, 1, 1, 1, true, &gen));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
    block = register_module(
        "block", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<Module>>{
                     std::make_shared<nn::Conv2d>(4, 3, 3, 1, 1, 1, 1, false, &gen),
                     std::make_shared<nn::BatchNorm2d>(3, 1e-3, std::nullopt),
                     std::make_shared<nn::ReLU>()}));
    to(DType::Float64);
    NoGradGuard no_grad;  // affine parameters other than ones and zeros
    for (auto& [name, p] : named_parameters())
      if (name.find("bn") != std::string::npos || name.find("block.1") != std::string::npos)
        p.copy_(randn(p.shape(), DType::Float64, &gen));
  }
  Tensor forward(const Tensor& x) override {
    return mean((*block)(relu((*bn)(conv->forward(x)))), std::vector<int64_t>{2, 3});
  }
};

// One SGD step (lr 0.1) with the given per-parameter gradients.
void sgd(nn::Module& m, const std::vector<Tensor>& grads) {
  NoGradGuard no_grad;
  const std::vector<Tensor> ps = m.parameters();
  for (std::size_t i = 0; i < ps.size(); ++i) {
    Tensor p = ps[i];
    p.sub_(grads[i] * 0.1);
  }
}

TEST(ConvertSyncBatchNorm, TrainsAsOneProcessOnTheWholeBatch) {
  const int r = pg().rank(), world = pg().world_size();
  const int64_t rows = 3;  // per rank
  auto sync_net = std::make_shared<Net>(7);
  Net whole(7);
  ASSERT_EQ(nn::convert_sync_batchnorm(sync_net), sync_net);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Tensor x = rank_input(r, {rows, 2, 5, 4}, DType::Float64, step);
    const Tensor t = rank_input(r, {rows, 3}, DType::Float64, 20 + step);
    std::vector<Tensor> xs, ts;
    for (int q = 0; q < world; ++q) {
      xs.push_back(rank_input(q, {rows, 2, 5, 4}, DType::Float64, step));
      ts.push_back(rank_input(q, {rows, 3}, DType::Float64, 20 + step));
    }
    // The loss sums over examples, so the whole batch's gradient is the ranks' summed.
    const Tensor y = sync_net->forward(x);
    std::vector<Tensor> g = autograd::grad({(y * t).sum()}, sync_net->parameters());
    for (Tensor& gi : g) {
      gi = gi.detach().clone();
      pg().all_reduce(gi);
    }
    const Tensor ya = whole.forward(cat(xs, 0));
    const std::vector<Tensor> ga = autograd::grad({(ya * cat(ts, 0)).sum()}, whole.parameters());
    expect_close(y, ya.narrow(0, r * rows, rows), 1e-12);
    for (std::size_t i = 0; i < g.size(); ++i) expect_close(g[i], ga[i], 1e-12);
    sgd(*sync_net, g);
    sgd(whole, ga);
    const auto sd = sync_net->state_dict(), sda = whole.state_dict();
    ASSERT_EQ(sd.size(), sda.size());
    for (std::size_t i = 0; i < sd.size(); ++i) {
      SCOPED_TRACE(sd[i].first);
      expect_close(sd[i].second, sda[i].second.to(sd[i].second.dtype()), 1e-12);
    }
  }
  sync_net->eval();
  whole.eval();
  const Tensor x = rank_input(r, {rows, 2, 5, 4}, DType::Float64, 9);
  expect_close(sync_net->forward(x), whole.forward(x), 1e-12);
}

TEST(ConvertSyncBatchNorm, KeepsTheStateDictTensorsAndTheConfiguration) {
  auto net = std::make_shared<Net>(3);
  net->block->eval();  // the training flag goes over per module
  const auto before = net->state_dict();
  const auto old_bn = net->bn;
  const auto old_block_bn = net->block->at<nn::BatchNorm2d>(1);
  nn::convert_sync_batchnorm(net);
  const auto after = net->state_dict();
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].first, before[i].first);
    // The same tensors, not copies (as PyTorch's conversion hands over its Parameters).
    EXPECT_EQ(after[i].second.impl(), before[i].second.impl()) << after[i].first;
  }
  // Both batch norms are SyncBatchNorm in the tree now, with the old configuration.
  auto sync_bn = std::dynamic_pointer_cast<nn::SyncBatchNorm>(net->named_children()[1].second);
  auto sync_block_bn = net->block->at<nn::SyncBatchNorm>(1);
  ASSERT_TRUE(sync_bn && sync_block_bn);
  EXPECT_EQ(net->named_children()[1].first, "bn");
  EXPECT_EQ(sync_bn->path(), "bn");
  EXPECT_EQ(sync_block_bn->path(), "block.1");
  for (auto [old, now] :
       {std::pair<nn::BatchNormBase*, nn::BatchNormBase*>{old_bn.get(), sync_bn.get()},
        {old_block_bn.get(), sync_block_bn.get()}}) {
    EXPECT_EQ(now->num_features(), old->num_features());
    EXPECT_EQ(now->eps(), old->eps());
    EXPECT_TRUE(now->momentum() == old->momentum());
    EXPECT_EQ(now->affine(), old->affine());
    EXPECT_EQ(now->track_running_stats(), old->track_running_stats());
    EXPECT_EQ(now->is_training(), old->is_training());
  }
  EXPECT_TRUE(sync_bn->is_training());
  EXPECT_FALSE(sync_block_bn->is_training());
  // The typed member still holds the old module, which forwards to its SyncBatchNorm: one step
  // through it moves the shared counter once.
  EXPECT_EQ(net->bn, old_bn);
  const Tensor x = randn({4, 2, 3, 3}, DType::Float64);
  net->forward(x);
  EXPECT_EQ(sync_bn->num_batches_tracked.item<int64_t>(), 1);
  // eval() through the tree reaches the SyncBatchNorm, so the typed path evaluates too.
  net->eval();
  const Tensor h = net->conv->forward(x);
  const Tensor want = batch_norm(h, sync_bn->running_mean, sync_bn->running_var, sync_bn->weight,
                                 sync_bn->bias, false, 0.1, sync_bn->eps());
  expect_close((*old_bn)(h), want, 1e-14);
  EXPECT_EQ(sync_bn->num_batches_tracked.item<int64_t>(), 1);
}

TEST(ConvertSyncBatchNorm, LeavesModulesWithoutBatchNormAlone) {
  Generator gen(4);
  auto mlp =
      std::make_shared<nn::MLP>(std::vector<int64_t>{3, 5, 2}, nn::Activation::Tanh, true, &gen);
  const auto children = mlp->named_children();
  const auto before = mlp->state_dict();
  EXPECT_EQ(nn::convert_sync_batchnorm(mlp), mlp);
  const auto after_children = mlp->named_children();
  ASSERT_EQ(after_children.size(), children.size());
  for (std::size_t i = 0; i < children.size(); ++i)
    EXPECT_EQ(after_children[i].second, children[i].second);
  const auto after = mlp->state_dict();
  ASSERT_EQ(after.size(), before.size());
  for (std::size_t i = 0; i < after.size(); ++i)
    EXPECT_EQ(after[i].second.impl(), before[i].second.impl());
  // GroupNorm is not a batch norm; a SyncBatchNorm stays as it is.
  auto seq = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::GroupNorm>(1, 4), std::make_shared<nn::SyncBatchNorm>(4)});
  const auto kept = seq->children();
  nn::convert_sync_batchnorm(seq);
  EXPECT_EQ(seq->children(), kept);
}

TEST(ConvertSyncBatchNorm, ABatchNormItselfBecomesASyncBatchNorm) {
  auto bn = std::make_shared<nn::BatchNorm1d>(5, 1e-4, 0.2, false, true);
  bn->eval();
  auto converted = nn::convert_sync_batchnorm(bn);
  auto sync = std::dynamic_pointer_cast<nn::SyncBatchNorm>(converted);
  ASSERT_TRUE(sync);
  EXPECT_FALSE(sync->affine());
  EXPECT_FALSE(sync->is_training());
  EXPECT_EQ(sync->eps(), 1e-4);
  EXPECT_EQ(sync->running_var.impl(), bn->running_var.impl());
  // One batch norm reachable twice becomes one SyncBatchNorm.
  auto shared = std::make_shared<nn::BatchNorm2d>(2);
  auto twice = std::make_shared<nn::Sequential>(
      std::initializer_list<std::shared_ptr<nn::Module>>{shared, shared});
  nn::convert_sync_batchnorm(twice);
  EXPECT_EQ((*twice)[0], (*twice)[1]);
  EXPECT_TRUE(twice->at<nn::SyncBatchNorm>(0));
}

TEST(ConvertSyncBatchNorm, ReplaceModuleErrorsNameTheModule) {
  auto seq = std::make_shared<nn::Sequential>(
      std::initializer_list<std::shared_ptr<nn::Module>>{std::make_shared<nn::ReLU>()});
  try {
    seq->replace_module("7", std::make_shared<nn::ReLU>());
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Index);
    EXPECT_NE(std::string(e.what()).find("[nn.Sequential]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'7'"), std::string::npos) << e.what();
  }
  try {
    seq->replace_module("0", seq);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Value);
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nn::convert_sync_batchnorm(nullptr), Error);
}

}  // namespace
}  // namespace adjoint::testing
