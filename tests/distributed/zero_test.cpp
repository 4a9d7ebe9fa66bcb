// ZeRO stages 1 and 2: ranks with slices of the batch and sharded optimizer state (and, for
// stage 2, sharded gradients) follow one process with a plain AdamW over the whole batch, and
// stay bitwise identical to each other; per-rank optimizer-state and gradient bytes fall as
// the layout says; consolidated checkpoints resume exactly under the same world size and move
// to and from a plain optimizer (any world size). Label unit (one process) and mpi (two ranks).
#include <gtest/gtest.h>

#include <limits>

#include "adjoint/nn.h"
#include "adjoint/optim.h"
#include "distributed/dist_support.h"
#include "support/expect.h"

namespace adjoint::testing {
namespace {

constexpr optim::AdamWOptions kAdamW{.lr = 0.05, .weight_decay = 0.1};

dist::ShardOptimizerFactory adamw() {
  return [](const std::vector<Tensor>& shard) {
    return std::make_unique<optim::AdamW>(shard, kAdamW);
  };
}

// Small buckets, so that buckets hold several parameters and chunks cut through them.
dist::DdpOptions zero_options(int stage) {
  return {.bucket_bytes = 400, .first_bucket_bytes = 100, .zero_stage = stage};
}

// The data of `steps` steps: [step, micro, rank, row, feature].
struct Data {
  Tensor x, y;
  Data(int steps, DType dtype) {
    Generator gen(77);
    const int n = pg().world_size();
    x = randn({steps, 2, n, 2, 3}, dtype, &gen);
    y = randn({steps, 2, n, 2, 2}, dtype, &gen);
  }
  Tensor mine(const Tensor& t, int step, int micro) const {
    return t.select(0, step).select(0, micro).select(0, pg().rank());
  }
  Tensor all(const Tensor& t, int step, int micro) const {
    const Tensor s = t.select(0, step).select(0, micro);
    return s.reshape({s.shape()[0] * s.shape()[1], s.shape()[2]});
  }
};

// One ZeRO step: two micro-batches, the first under no_sync; clipping; the update. The loss
// of the second micro-batch is returned.
double zero_step(nn::Module& m, dist::DistributedDataParallel& ddp, dist::ZeroOptimizer& opt,
                 const Data& d, int step) {
  opt.zero_grad();
  {
    auto guard = ddp.no_sync();
    mse(m, d.mine(d.x, step, 0), d.mine(d.y, step, 0)).backward();
  }
  Tensor loss = mse(m, d.mine(d.x, step, 1), d.mine(d.y, step, 1));
  loss.backward();
  opt.clip_grad_norm_(0.5);
  opt.step();
  return loss.item<double>();
}

void plain_step(nn::Module& m, optim::Optimizer& opt, const Data& d, int step) {
  opt.zero_grad();
  for (int micro = 0; micro < 2; ++micro)
    mse(m, d.all(d.x, step, micro), d.all(d.y, step, micro)).backward();
  optim::clip_grad_norm_(m.parameters(), 0.5);
  opt.step();
}

void follow_one_process(int stage, DType dtype, double tol) {
  const Data d(3, dtype);
  auto mine = small_mlp(400 + pg().rank(), dtype);  // DDP broadcasts rank 0's weights
  dist::DistributedDataParallel ddp(*mine, zero_options(stage));
  dist::ZeroOptimizer opt(ddp, adamw());
  auto single = small_mlp(400, dtype);
  optim::AdamW single_opt(single->parameters(), kAdamW);
  for (int step = 0; step < 3; ++step) {
    zero_step(*mine, ddp, opt, d, step);
    plain_step(*single, single_opt, d, step);
  }
  for (std::size_t i = 0; i < mine->parameters().size(); ++i)
    expect_close(mine->parameters()[i].detach(), single->parameters()[i].detach(), tol);
  expect_same_on_every_rank(mine->parameters());
}

TEST(Zero, Stage1FollowsOneProcessFloat64) { follow_one_process(1, DType::Float64, 1e-12); }
TEST(Zero, Stage2FollowsOneProcessFloat64) { follow_one_process(2, DType::Float64, 1e-12); }
TEST(Zero, Stage1FollowsOneProcessFloat32) { follow_one_process(1, DType::Float32, 1e-6); }
TEST(Zero, Stage2FollowsOneProcessFloat32) { follow_one_process(2, DType::Float32, 1e-6); }

// Per-rank bytes: the optimizer state is the rank's chunks (1/N of the padded buckets) and,
// in stage 2, so are the gradients; parameters stay whole.
TEST(Zero, ShardsHoldTheirShareOfStateAndGradients) {
  const int n = pg().world_size();
  const Data d(1, DType::Float64);
  auto m = small_mlp(5, DType::Float64);
  const int64_t param_bytes = m->num_parameters() * 8;
  for (int stage : {1, 2}) {
    dist::DistributedDataParallel ddp(*m, zero_options(stage));
    dist::ZeroOptimizer opt(ddp, adamw());
    zero_step(*m, ddp, opt, d, 0);
    // A rank's chunk of a bucket: ceil(the members' elements / N), from the parameters.
    int64_t chunk_bytes = 0;
    for (const auto& members : ddp.buckets()) {
      int64_t numel = 0;
      for (int64_t i : members) numel += m->parameters()[i].numel();
      chunk_bytes += (numel + n - 1) / n * 8;
    }
    const dist::ZeroMemory mem = opt.memory();
    EXPECT_EQ(mem.parameters, param_bytes);
    // exp_avg and exp_avg_sq per chunk, and one 0-d step per bucket.
    EXPECT_EQ(mem.optimizer_state,
              2 * chunk_bytes + 8 * static_cast<int64_t>(ddp.buckets().size()));
    EXPECT_LE(2 * chunk_bytes, 2 * param_bytes / n + 2 * 8 * ddp.buckets().size());
    if (stage == 2) {
      EXPECT_EQ(mem.gradients, chunk_bytes) << "stage 2 keeps only the gradient shards";
      for (const Tensor& p : m->parameters()) EXPECT_FALSE(p.grad().defined());
    } else {
      // Whole .grad, DDP's buckets and the shard's chunk.
      EXPECT_GE(mem.gradients, 2 * param_bytes + chunk_bytes);
    }
  }
}

// Save after two steps under this world size; a fresh model and optimizer loaded from it
// continue bitwise as the run that went on. The same state loads into a plain AdamW over the
// whole batch (one process), which continues within float64 rounding.
TEST(Zero, ConsolidatedCheckpointsResumeUnderAnyWorldSize) {
  const Data d(4, DType::Float64);
  for (int stage : {1, 2}) {
    auto m = small_mlp(6, DType::Float64);
    dist::DistributedDataParallel ddp(*m, zero_options(stage));
    dist::ZeroOptimizer opt(ddp, adamw());
    for (int step = 0; step < 2; ++step) zero_step(*m, ddp, opt, d, step);
    const optim::StateDict saved = opt.state_dict();
    std::vector<Tensor> saved_params;
    for (const Tensor& p : m->parameters()) saved_params.push_back(p.detach().clone());
    // Keys as a plain AdamW over the model names them.
    auto plain_model = small_mlp(6, DType::Float64);
    optim::AdamW plain(plain_model->parameters(), kAdamW);
    plain_step(*plain_model, plain, d, 0);
    std::vector<std::string> want_keys, got_keys;
    for (const auto& [k, v] : plain.state_dict()) want_keys.push_back(k);
    for (const auto& [k, v] : saved) got_keys.push_back(k);
    std::sort(want_keys.begin(), want_keys.end());
    std::sort(got_keys.begin(), got_keys.end());
    EXPECT_EQ(got_keys, want_keys);

    std::vector<double> went_on;
    for (int step = 2; step < 4; ++step) went_on.push_back(zero_step(*m, ddp, opt, d, step));

    auto fresh = small_mlp(60, DType::Float64);
    for (std::size_t i = 0; i < saved_params.size(); ++i) {
      NoGradGuard no_grad;
      Tensor(fresh->parameters()[i]).copy_(saved_params[i]);
    }
    dist::DistributedDataParallel ddp2(*fresh, zero_options(stage));
    dist::ZeroOptimizer opt2(ddp2, adamw());
    opt2.load_state_dict(saved);
    for (int step = 2; step < 4; ++step)
      EXPECT_EQ(zero_step(*fresh, ddp2, opt2, d, step), went_on[step - 2]) << "stage " << stage;
    for (std::size_t i = 0; i < saved_params.size(); ++i)
      expect_close(fresh->parameters()[i].detach(), m->parameters()[i].detach(), 0);

    // One process, plain AdamW, whole batch.
    auto one = small_mlp(61, DType::Float64);
    for (std::size_t i = 0; i < saved_params.size(); ++i) {
      NoGradGuard no_grad;
      Tensor(one->parameters()[i]).copy_(saved_params[i]);
    }
    optim::AdamW one_opt(one->parameters(), kAdamW);
    one_opt.load_state_dict(saved);
    for (int step = 2; step < 4; ++step) plain_step(*one, one_opt, d, step);
    for (std::size_t i = 0; i < saved_params.size(); ++i)
      expect_close(one->parameters()[i].detach(), m->parameters()[i].detach(), 1e-12);
  }
}

// The other way: a plain optimizer's checkpoint (one process) resharded over the ranks.
TEST(Zero, APlainOptimizersCheckpointLoadsIntoShards) {
  const Data d(3, DType::Float64);
  auto single = small_mlp(8, DType::Float64);
  optim::AdamW single_opt(single->parameters(), kAdamW);
  plain_step(*single, single_opt, d, 0);
  auto m = small_mlp(80, DType::Float64);
  for (std::size_t i = 0; i < m->parameters().size(); ++i) {
    NoGradGuard no_grad;
    Tensor(m->parameters()[i]).copy_(single->parameters()[i]);
  }
  dist::DistributedDataParallel ddp(*m, zero_options(2));
  dist::ZeroOptimizer opt(ddp, adamw());
  opt.load_state_dict(single_opt.state_dict());
  for (int step = 1; step < 3; ++step) {
    zero_step(*m, ddp, opt, d, step);
    plain_step(*single, single_opt, d, step);
  }
  for (std::size_t i = 0; i < m->parameters().size(); ++i)
    expect_close(m->parameters()[i].detach(), single->parameters()[i].detach(), 1e-12);
  EXPECT_EQ(opt.step_count(), single_opt.step_count());
}

// An overflow in one parameter that lies wholly in rank 0's chunk: only rank 0's shard sees
// it. With the flags combined over the ranks every rank skips the step; without, the ranks
// disagree, which is an error on every rank (never a silent divergence or a hang).
TEST(Zero, GradScalerSkipsOnEveryRankWhenOneShardOverflows) {
  const int n = pg().world_size();
  const Data d(1, DType::Float32);
  for (int stage : {1, 2}) {
    for (bool combined : {true, false}) {
      if (!combined && n == 1) continue;
      auto m = small_mlp(10, DType::Float32);
      dist::DistributedDataParallel ddp(*m, zero_options(stage));
      dist::ZeroOptimizer opt(ddp, adamw());
      int64_t target = -1;  // a parameter inside rank 0's chunk of its bucket
      for (std::size_t b = 0; b < ddp.buckets().size() && target < 0; ++b)
        for (int64_t i : ddp.buckets()[b])
          if (ddp.offset_in_bucket(i) + ddp.parameters()[i].numel() <=
              ddp.bucket_padded_numel(b) / n) {
            target = i;
            break;
          }
      ASSERT_GE(target, 0);
      optim::GradScalerOptions options;
      if (combined) options.combine_found_inf = dist::found_inf_on_any_rank(pg());
      optim::GradScaler scaler(options);
      std::vector<Tensor> before;
      for (const Tensor& p : m->parameters()) before.push_back(p.detach().clone());
      opt.zero_grad();
      const Tensor& p = ddp.parameters()[target];
      Tensor loss = mse(*m, d.mine(d.x, 0, 0), d.mine(d.y, 0, 0)) +
                    (p * std::numeric_limits<double>::infinity()).sum();
      scaler.scale(loss).backward();
      if (combined) {
        EXPECT_FALSE(opt.step(scaler)) << "stage " << stage;
        scaler.update();
        EXPECT_EQ(scaler.get_scale(), 65536.0 / 2);
        for (std::size_t i = 0; i < before.size(); ++i)
          expect_close(m->parameters()[i].detach(), before[i], 0);
      } else {
        expect_error([&] { opt.step(scaler); }, ErrorKind::Value,
                     {"[dist.ZeroOptimizer]", "disagree", "found_inf_on_any_rank"});
      }
    }
  }
}

// A shard keeps one step for all its elements: a plain checkpoint whose parameters sharing a
// shard were updated a different number of times (or one never) is refused, whole. Stage 2
// refuses a step after backward runs that were all under no_sync (only local .grad exists).
TEST(Zero, StatesAShardCannotHoldAreRefused) {
  const Data d(1, DType::Float64);
  auto m = small_mlp(11, DType::Float64);
  dist::DistributedDataParallel ddp(*m, zero_options(2));
  dist::ZeroOptimizer opt(ddp, adamw());
  // Find two parameters in one bucket; give the plain optimizer a step only for the first.
  const auto& members = ddp.buckets().back();
  ASSERT_GE(members.size(), 2u);
  auto plain_model = small_mlp(11, DType::Float64);
  optim::AdamW plain(plain_model->parameters(), kAdamW);
  mse(*plain_model, d.all(d.x, 0, 0), d.all(d.y, 0, 0)).backward();
  plain_model->parameters()[members[1]].set_grad(Tensor());  // never updated
  plain.step();
  expect_error([&] { opt.load_state_dict(plain.state_dict()); }, ErrorKind::Value,
               {"[dist.ZeroOptimizer]", "load_state_dict", "none"});
  opt.zero_grad();
  {
    auto guard = ddp.no_sync();
    mse(*m, d.mine(d.x, 0, 0), d.mine(d.y, 0, 0)).backward();
  }
  expect_error([&] { opt.step(); }, ErrorKind::Value, {"[dist.ZeroOptimizer]", "no_sync"});
}

TEST(Zero, MisuseIsNamed) {
  auto m = small_mlp(9, DType::Float64);
  {
    dist::DistributedDataParallel ddp(*m);
    expect_error([&] { dist::ZeroOptimizer opt(ddp, adamw()); }, ErrorKind::Value,
                 {"[dist.ZeroOptimizer]", "zero_stage 1 or 2"});
  }
  expect_error(
      [&] {
        dist::DistributedDataParallel ddp(*m, {.find_unused_parameters = true, .zero_stage = 1});
      },
      ErrorKind::Value, {"[dist.DistributedDataParallel]", "find_unused_parameters"});
  expect_error([&] { dist::DistributedDataParallel ddp(*m, {.zero_stage = 3}); }, ErrorKind::Value,
               {"zero_stage must be 0, 1 or 2"});
}

}  // namespace
}  // namespace adjoint::testing
