// Data-parallel helpers: broadcast_module makes every rank start from root's model,
// average_gradients gives each rank the mean of the ranks' gradients (the oracle: every
// rank's loss computed here in one process), and DistributedBatchSampler's batches are the
// rows of one process's global batch and resume exactly. Label unit (one process) and mpi.
#include <gtest/gtest.h>

#include "adjoint/nn.h"
#include "adjoint/optim.h"
#include "distributed/dist_support.h"
#include "support/expect.h"

namespace adjoint::testing {
namespace {

std::shared_ptr<nn::MLP> model_of(uint64_t seed) {
  Generator gen(seed);
  auto m =
      std::make_shared<nn::MLP>(std::vector<int64_t>{3, 5, 2}, nn::Activation::Tanh, true, &gen);
  m->to(DType::Float64);
  return m;
}

TEST(DataParallel, BroadcastModuleCopiesRootsParameters) {
  const int root = pg().world_size() - 1;
  auto m = model_of(100 + pg().rank());
  dist::broadcast_module(*m, root);
  auto want = model_of(100 + root)->parameters();
  auto got = m->parameters();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) expect_close(got[i].detach(), want[i], 0);
}

Tensor loss_of(nn::MLP& m, int rank) {
  Tensor x = rank_input(rank, {4, 3}, DType::Float64, 20);
  return (m.forward(x).tanh() * rank_input(rank, {4, 2}, DType::Float64, 21)).sum();
}

TEST(DataParallel, AverageGradientsIsTheMeanOverRanks) {
  const int n = pg().world_size();
  auto m = model_of(7);
  // Bias of the last layer gets no gradient on any rank: it must stay without one.
  auto params = m->parameters();
  loss_of(*m, pg().rank()).backward();
  params.back().zero_grad();
  // Oracle: the ranks' gradients, one after another in this process.
  auto o = model_of(7);
  auto op = o->parameters();
  std::vector<Tensor> want(op.size());
  for (int r = 0; r < n; ++r) {
    o->zero_grad();
    loss_of(*o, r).backward();
    for (std::size_t i = 0; i < op.size(); ++i)
      want[i] = r == 0 ? op[i].grad().clone() : want[i] + op[i].grad();
  }
  // A tiny bucket size: several buckets, each queued before the first is awaited.
  dist::average_gradients(params, nullptr, /*bucket_bytes=*/64);
  for (std::size_t i = 0; i + 1 < params.size(); ++i)
    expect_close(params[i].grad(), want[i] / n, 1e-13);
  EXPECT_FALSE(params.back().grad().defined());
}

TEST(DataParallel, AParameterWithAGradientOnOneRankOnlyCountsAsZeroElsewhere) {
  const int n = pg().world_size();
  Tensor p = zeros({3}, DType::Float64).requires_grad_(true);
  if (pg().rank() == 0) p.set_grad(ones({3}, DType::Float64));
  dist::average_gradients({p});
  expect_close(p.grad(), ones({3}, DType::Float64) / n, 0);
}

// Data parallelism's contract for the helpers here: N ranks, each with its slice of the batch
// and average_gradients before the step, follow one process with the whole batch, and stay
// bitwise identical to each other. float64, AdamW, three steps.
TEST(DataParallel, RanksWithSlicesOfTheBatchFollowOneProcessWithTheWholeBatch) {
  const int n = pg().world_size(), r = pg().rank();
  Generator data_gen(55);
  Tensor x = randn({4 * n, 3}, DType::Float64, &data_gen);
  Tensor y = randn({4 * n, 2}, DType::Float64, &data_gen);
  auto loss = [](nn::MLP& m, const Tensor& xs, const Tensor& ys) {
    return (m.forward(xs) - ys).square().mean();
  };
  // Rank r starts from its own weights; broadcast_module makes them rank 0's.
  auto mine = model_of(300 + r);
  dist::broadcast_module(*mine);
  optim::AdamW opt(mine->parameters(), {.lr = 0.05, .weight_decay = 0.1});
  auto single = model_of(300);
  optim::AdamW single_opt(single->parameters(), {.lr = 0.05, .weight_decay = 0.1});
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    loss(*mine, x.narrow(0, 4 * r, 4), y.narrow(0, 4 * r, 4)).backward();
    dist::average_gradients(mine->parameters());
    opt.step();
    single_opt.zero_grad();
    loss(*single, x, y).backward();
    single_opt.step();
  }
  auto got = mine->parameters(), want = single->parameters();
  for (std::size_t i = 0; i < got.size(); ++i) {
    expect_close(got[i].detach(), want[i].detach(), 1e-12);
    // Bitwise the same on every rank: gather every rank's copy and compare with rank 0's.
    Tensor all = pg().all_gather(got[i].detach().reshape({1, -1}));
    for (int q = 1; q < n; ++q)
      EXPECT_EQ(all.select(0, q).to_vector<double>(), all.select(0, 0).to_vector<double>())
          << "parameter " << i << " differs between rank 0 and rank " << q;
  }
}

data::ByteDataset dataset() {
  std::vector<uint8_t> bytes(5000);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>((i * 131) % 251);
  return data::ByteDataset(bytes, 0.1);
}

TEST(DistributedSampler, RanksDrawDisjointRowsOfTheSingleProcessBatch) {
  const int n = pg().world_size(), r = pg().rank();
  auto ds = dataset();
  dist::DistributedBatchSampler sampler(ds, data::Split::Train, 3, 8, 42, r, n);
  Generator single(42);
  for (int step = 0; step < 3; ++step) {
    data::TextBatch mine = sampler.next();
    data::TextBatch all = ds.batch(data::Split::Train, 3 * n, 8, single);
    expect_close(mine.inputs, all.inputs.narrow(0, 3 * r, 3), 0);
    expect_close(mine.targets, all.targets.narrow(0, 3 * r, 3), 0);
  }
  EXPECT_EQ(sampler.step(), 3);
  // The ranks' batches differ: gather them and compare rank 0's with the last rank's.
  dist::DistributedBatchSampler again(ds, data::Split::Train, 3, 8, 42, r, n);
  Tensor everyone = pg().all_gather(again.next().inputs);
  if (n > 1) {
    EXPECT_NE(everyone.narrow(0, 0, 3).to_vector<int64_t>(),
              everyone.narrow(0, 3 * (n - 1), 3).to_vector<int64_t>());
  }
}

TEST(DistributedSampler, ResumeContinuesExactly) {
  auto ds = dataset();
  dist::DistributedBatchSampler a(ds, data::Split::Train, 2, 16, 7, pg().rank(), pg().world_size());
  a.next();
  a.next();
  auto saved = a.state();
  data::TextBatch want = a.next();
  dist::DistributedBatchSampler b(ds, data::Split::Train, 2, 16, 7, pg().rank(), pg().world_size());
  b.set_state(saved);
  EXPECT_EQ(b.step(), 2);
  data::TextBatch got = b.next();
  expect_close(got.inputs, want.inputs, 0);
  expect_close(got.targets, want.targets, 0);
}

TEST(DistributedSampler, BadArgumentsAreNamed) {
  auto ds = dataset();
  expect_error([&] { dist::DistributedBatchSampler(ds, data::Split::Train, 2, 8, 1, 2, 2); },
               ErrorKind::Value,
               {"[dist.DistributedBatchSampler]", "rank 2 is not in a world of 2"});
}

}  // namespace
}  // namespace adjoint::testing
