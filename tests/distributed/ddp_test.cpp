// DistributedDataParallel: N ranks with slices of the batch follow one process with the whole
// batch (the oracle, computed here in one process from the same seeded data), and stay bitwise
// identical to each other; buckets start during backward in bucket order and are rebuilt from
// the observed order; no_sync, unused parameters, checkpointing and the GradScaler. Label
// unit (one process) and mpi (two ranks).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "adjoint/checkpoint.h"
#include "adjoint/nn.h"
#include "adjoint/optim.h"
#include "distributed/dist_support.h"
#include "support/expect.h"

namespace adjoint::testing {
namespace {

// Per step, two micro-batches (the first under no_sync) of 2 rows per rank; clipping and
// AdamW with weight decay. One process takes each micro-batch's rows of all ranks at once.
void follow_one_process(DType dtype, double tol, dist::DdpOptions options = {}) {
  const int n = pg().world_size(), r = pg().rank();
  Generator data_gen(55);
  const Tensor x = randn({3, 2, n, 2, 3}, dtype, &data_gen);  // [step, micro, rank, row, in]
  const Tensor y = randn({3, 2, n, 2, 2}, dtype, &data_gen);
  auto mine = small_mlp(300 + r, dtype);  // DDP makes these rank 0's weights
  dist::DistributedDataParallel ddp(*mine, options);
  optim::AdamW opt(mine->parameters(), {.lr = 0.05, .weight_decay = 0.1});
  auto single = small_mlp(300, dtype);
  optim::AdamW single_opt(single->parameters(), {.lr = 0.05, .weight_decay = 0.1});
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad(/*set_to_none=*/step == 0);  // later steps: linear adds into .grad itself
    for (int micro = 0; micro < 2; ++micro) {
      const Tensor xs = x.select(0, step).select(0, micro).select(0, r);
      const Tensor ys = y.select(0, step).select(0, micro).select(0, r);
      if (micro == 0) {
        auto guard = ddp.no_sync();
        mse(*mine, xs, ys).backward();
      } else {
        mse(*mine, xs, ys).backward();
      }
    }
    optim::clip_grad_norm_(mine->parameters(), 0.5);
    opt.step();

    single_opt.zero_grad();
    for (int micro = 0; micro < 2; ++micro)
      mse(*single, x.select(0, step).select(0, micro).reshape({2 * n, 3}),
          y.select(0, step).select(0, micro).reshape({2 * n, 2}))
          .backward();
    optim::clip_grad_norm_(single->parameters(), 0.5);
    single_opt.step();
  }
  auto got = mine->parameters(), want = single->parameters();
  for (std::size_t i = 0; i < got.size(); ++i) expect_close(got[i].detach(), want[i].detach(), tol);
  expect_same_on_every_rank(got);
}

TEST(DistributedDataParallel, RanksWithSlicesOfTheBatchFollowOneProcessFloat64) {
  follow_one_process(DType::Float64, 1e-12);
}

TEST(DistributedDataParallel, RanksWithSlicesOfTheBatchFollowOneProcessFloat32) {
  follow_one_process(DType::Float32, 1e-6);
}

// .grad as views of the buckets: the same steps (zero_grad(false) after the first step keeps
// the views, so backward accumulates into the buckets; the first step's set_to_none does not).
TEST(DistributedDataParallel, GradientsAsBucketViewsFollowOneProcess) {
  follow_one_process(DType::Float64, 1e-12, {.gradient_as_bucket_view = true});
}

// One copy of the gradients instead of two: the .grad of a bucket's members are views of it.
TEST(DistributedDataParallel, GradientsAsBucketViewsHoldOneCopy) {
  const int r = pg().rank();
  for (bool views : {false, true}) {
    auto m = small_mlp(12, DType::Float64);
    dist::DistributedDataParallel ddp(*m,
                                      {.bucket_bytes = 1 << 20, .gradient_as_bucket_view = views});
    for (int step = 0; step < 2; ++step) {  // the second after the rebuild, into views
      m->zero_grad(/*set_to_none=*/false);
      mse(*m, rank_input(r, {4, 3}, DType::Float64, 40 + step),
          rank_input(r, {4, 2}, DType::Float64, 42 + step))
          .backward();
    }
    // One copy is the parameters' bytes, plus at most N - 1 elements of padding per bucket.
    const int64_t params = m->num_parameters() * 8;
    const int64_t padding =
        8 * (pg().world_size() - 1) * static_cast<int64_t>(ddp.buckets().size());
    const int64_t copies = views ? 1 : 2;
    EXPECT_GE(ddp.gradient_bytes(), copies * params);
    EXPECT_LE(ddp.gradient_bytes(), copies * params + padding);
    const auto p = m->parameters();
    EXPECT_EQ(p[0].grad().shares_storage(p[1].grad()), views) << "one bucket holds both";
  }
  expect_error(
      [] {
        auto m = small_mlp(13, DType::Float64);
        dist::DistributedDataParallel ddp(*m, {.zero_stage = 2, .gradient_as_bucket_view = true});
      },
      ErrorKind::Value, {"gradient_as_bucket_view", "stage 2"});
}

TEST(DistributedDataParallel, NoSyncKeepsTheLocalGradient) {
  const int r = pg().rank();
  auto m = small_mlp(1, DType::Float64);
  dist::DistributedDataParallel ddp(*m);
  const Tensor x = rank_input(r, {4, 3}, DType::Float64, 1);
  const Tensor y = rank_input(r, {4, 2}, DType::Float64, 2);
  {
    auto guard = ddp.no_sync();
    mse(*m, x, y).backward();
  }
  auto oracle = small_mlp(1, DType::Float64);
  mse(*oracle, x, y).backward();
  for (std::size_t i = 0; i < m->parameters().size(); ++i)
    expect_close(m->parameters()[i].grad(), oracle->parameters()[i].grad(), 0);
}

// One bucket per parameter: every all-reduce starts from a hook (during backward), and after
// the first step the buckets follow the order the gradients became final in.
TEST(DistributedDataParallel, BucketsStartDuringBackwardAndFollowTheObservedOrder) {
  const int n = pg().world_size(), r = pg().rank();
  auto m = small_mlp(2, DType::Float64);
  dist::DistributedDataParallel ddp(*m, {.bucket_bytes = 1, .first_bucket_bytes = 1});
  const auto count = static_cast<int64_t>(ddp.parameters().size());
  ASSERT_EQ(ddp.buckets().size(), static_cast<std::size_t>(count));
  for (int64_t b = 0; b < count; ++b)  // before any backward: reverse parameter order
    EXPECT_EQ(ddp.buckets()[b], std::vector<int64_t>{count - 1 - b});
  auto oracle = small_mlp(2, DType::Float64);
  for (int step = 0; step < 2; ++step) {
    m->zero_grad();
    mse(*m, rank_input(r, {4, 3}, DType::Float64, 3 + step),
        rank_input(r, {4, 2}, DType::Float64, 5 + step))
        .backward();
    EXPECT_EQ(ddp.last_stats().buckets, count);
    EXPECT_EQ(ddp.last_stats().launched_during_backward, count);
    // The gradient is the mean of the ranks' gradients.
    std::vector<Tensor> want(count);
    for (int q = 0; q < n; ++q) {
      oracle->zero_grad();
      mse(*oracle, rank_input(q, {4, 3}, DType::Float64, 3 + step),
          rank_input(q, {4, 2}, DType::Float64, 5 + step))
          .backward();
      for (int64_t i = 0; i < count; ++i)
        want[i] = q == 0 ? oracle->parameters()[i].grad().clone()
                         : want[i] + oracle->parameters()[i].grad();
    }
    for (int64_t i = 0; i < count; ++i) expect_close(m->parameters()[i].grad(), want[i] / n, 1e-13);
  }
  const auto& order = ddp.observed_ready_order();
  ASSERT_EQ(order.size(), static_cast<std::size_t>(count));
  for (int64_t b = 0; b < count; ++b) EXPECT_EQ(ddp.buckets()[b], std::vector<int64_t>{order[b]});
}

TEST(DistributedDataParallel, TheFirstBucketIsSmall) {
  auto m = small_mlp(3, DType::Float64);  // bytes in reverse order: 16, 128, 64, 512, 64, 192
  dist::DistributedDataParallel ddp(*m, {.bucket_bytes = 1 << 20, .first_bucket_bytes = 100});
  ASSERT_EQ(ddp.buckets().size(), 2u);
  EXPECT_EQ(ddp.buckets()[0], (std::vector<int64_t>{5, 4}));  // 16 + 128 bytes pass 100
  EXPECT_EQ(ddp.buckets()[1], (std::vector<int64_t>{3, 2, 1, 0}));
}

// A model with a head used on rank 0 only and a head used nowhere.
class TwoHeads : public nn::Module {
 public:
  TwoHeads() : nn::Module("TwoHeads") {
    Generator gen(9);
    a = register_parameter("a", randn({3}, DType::Float64, &gen));
    b = register_parameter("b", randn({3}, DType::Float64, &gen));
    c = register_parameter("c", randn({3}, DType::Float64, &gen));
  }
  Tensor loss(const Tensor& x, bool use_b) const {
    Tensor l = (x * a).tanh().sum();
    return use_b ? l + (x * b).square().sum() : l;
  }
  Tensor a, b, c;
};

TEST(DistributedDataParallel, FindUnusedParametersAveragesWithZerosAndKeepsUnusedOnesEmpty) {
  const int n = pg().world_size(), r = pg().rank();
  TwoHeads m;
  dist::DistributedDataParallel ddp(m, {.find_unused_parameters = true});
  const Tensor x = rank_input(r, {3}, DType::Float64, 7);
  m.loss(x, r == 0).backward();
  TwoHeads o;
  Tensor want_a, want_b;
  for (int q = 0; q < n; ++q) {
    o.zero_grad();
    o.loss(rank_input(q, {3}, DType::Float64, 7), q == 0).backward();
    want_a = q == 0 ? o.a.grad().clone() : want_a + o.a.grad();
    if (q == 0) want_b = o.b.grad().clone();  // the other ranks contribute zeros
  }
  expect_close(m.a.grad(), want_a / n, 1e-14);
  expect_close(m.b.grad(), want_b / n, 1e-14);
  EXPECT_FALSE(m.c.grad().defined()) << "no rank had a gradient for c";
}

TEST(DistributedDataParallel, AParameterWithoutAGradientIsAnErrorThatSaysWhatToDo) {
  const int r = pg().rank();
  TwoHeads m;
  dist::DistributedDataParallel ddp(m);
  const Tensor x = rank_input(r, {3}, DType::Float64, 8);
  expect_error([&] { m.loss(x, true).backward(); }, ErrorKind::Autograd,
               {"[dist.DistributedDataParallel]", "c [3] (float64)", "find_unused_parameters"});
  // The ranks finished their collectives: the next step works, and a parameter that keeps a
  // .grad from an earlier step contributes it instead of counting as missing.
  m.zero_grad(/*set_to_none=*/false);
  m.c.set_grad(zeros({3}, DType::Float64));
  m.loss(x, true).backward();
  EXPECT_TRUE(m.c.grad().defined());
}

// b is used on rank 0 only: the error is raised on every rank (not only where b had no
// gradient), before the rebuild's broadcast, so the ranks' collectives stay in step and the next
// backward averages correctly.
TEST(DistributedDataParallel, AParameterMissingOnOneRankIsAnErrorOnEveryRank) {
  const int n = pg().world_size(), r = pg().rank();
  TwoHeads m;
  dist::DistributedDataParallel ddp(m);
  m.c.set_grad(zeros({3}, DType::Float64));  // c keeps a .grad: it counts as had
  const Tensor x = rank_input(r, {3}, DType::Float64, 9);
  if (n > 1) {
    expect_error([&] { m.loss(x, r == 0).backward(); }, ErrorKind::Autograd,
                 {"[dist.DistributedDataParallel]", "b [3] (float64) on 1 of 2 ranks"});
  }
  m.zero_grad();
  m.c.set_grad(zeros({3}, DType::Float64));
  m.loss(x, true).backward();
  TwoHeads o;
  Tensor want;
  for (int q = 0; q < n; ++q) {
    o.zero_grad();
    o.loss(rank_input(q, {3}, DType::Float64, 9), true).backward();
    want = q == 0 ? o.b.grad().clone() : want + o.b.grad();
  }
  expect_close(m.b.grad(), want / n, 1e-14);
}

// A backward that fails after some buckets were launched (a hook throws in the middle): the
// run is abandoned cleanly, and the next backward averages as if nothing had happened.
TEST(DistributedDataParallel, ABackwardThatFailsMidwayLeavesTheNextOneClean) {
  const int n = pg().world_size(), r = pg().rank();
  TwoHeads m;
  dist::DistributedDataParallel ddp(m, {.bucket_bytes = 1, .first_bucket_bytes = 1});
  const Tensor x = rank_input(r, {3}, DType::Float64, 10);
  auto loss = [&](bool fail) {
    Tensor h = x * m.a;  // a's gradient comes after b's and c's are final
    if (fail)
      h.register_hook(
          [](const Tensor&) -> Tensor { throw Error(ErrorKind::Value, "hook", "boom"); });
    return (h.tanh() * m.b).sum() + m.c.square().sum();
  };
  expect_error([&] { loss(true).backward(); }, ErrorKind::Value, {"boom"});
  m.zero_grad();
  loss(false).backward();
  TwoHeads o;
  std::vector<Tensor> want(3);
  for (int q = 0; q < n; ++q) {
    o.zero_grad();
    const Tensor xq = rank_input(q, {3}, DType::Float64, 10);
    ((xq * o.a).tanh() * o.b).sum().add(o.c.square().sum()).backward();
    const Tensor g[3] = {o.a.grad(), o.b.grad(), o.c.grad()};
    for (int i = 0; i < 3; ++i) want[i] = q == 0 ? g[i].clone() : want[i] + g[i];
  }
  expect_close(m.a.grad(), want[0] / n, 1e-14);
  expect_close(m.b.grad(), want[1] / n, 1e-14);
  expect_close(m.c.grad(), want[2] / n, 1e-14);
}

TEST(DistributedDataParallel, GradientsMatchWithCheckpointedBlocks) {
  const int r = pg().rank();
  auto plain = small_mlp(4, DType::Float64), ck = small_mlp(4, DType::Float64);
  dist::DistributedDataParallel ddp_plain(*plain), ddp_ck(*ck);
  const Tensor x = rank_input(r, {4, 3}, DType::Float64, 11);
  mse(*plain, x, zeros({4, 2}, DType::Float64)).backward();
  Tensor out = checkpoint([&](const std::vector<Tensor>& xs) { return ck->forward(xs[0]); }, {x});
  out.square().mean().backward();
  EXPECT_EQ(ddp_ck.last_stats().buckets, ddp_plain.last_stats().buckets);
  for (std::size_t i = 0; i < plain->parameters().size(); ++i)
    expect_close(ck->parameters()[i].grad(), plain->parameters()[i].grad(), 1e-14);
}

// An overflow on one rank reaches every rank through the average, so every rank's GradScaler
// skips the step and backs off together.
TEST(DistributedDataParallel, AnOverflowOnOneRankSkipsTheStepEverywhere) {
  const int r = pg().rank();
  auto m = small_mlp(5, DType::Float32);
  dist::DistributedDataParallel ddp(*m);
  optim::AdamW opt(m->parameters(), {.lr = 0.1});
  optim::GradScaler scaler;
  std::vector<Tensor> before;
  for (const Tensor& p : m->parameters()) before.push_back(p.detach().clone());
  Tensor loss =
      mse(*m, rank_input(r, {4, 3}, DType::Float32, 12), rank_input(r, {4, 2}, DType::Float32, 13));
  if (r == 0) loss = loss * std::numeric_limits<double>::infinity();
  scaler.scale(loss).backward();
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 65536.0 / 2);
  for (std::size_t i = 0; i < before.size(); ++i)
    expect_close(m->parameters()[i].detach(), before[i], 0);
}

TEST(DistributedDataParallel, BadOptionsAreNamed) {
  auto m = small_mlp(6, DType::Float64);
  expect_error([&] { dist::DistributedDataParallel ddp(*m, {.bucket_bytes = 0}); },
               ErrorKind::Value, {"[dist.DistributedDataParallel]", "bucket sizes"});
  const Tensor w = m->parameters()[0];
  expect_error(
      [&] {
        dist::DistributedDataParallel ddp(std::vector<Tensor>{w, w});
      },
      ErrorKind::Value, {"[dist.DistributedDataParallel]", "same tensor", "once"});
}

}  // namespace
}  // namespace adjoint::testing
