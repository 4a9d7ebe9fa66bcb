// Collectives know their training step (Note [Collectives know their step]): a rank that
// catches an error inside backward and goes on is an out-of-step Error on every rank at the
// first collective that mixes steps (plain DDP and both ZeRO stages), never an average of one
// rank's step with another's; the step counts synchronising backward runs and nothing else.
// Label unit (one process: the descriptor check itself) and mpi (two ranks: the scenarios).
#include <gtest/gtest.h>

#include <memory>

#include "adjoint/nn.h"
#include "adjoint/optim.h"
#include "distributed/call_check.h"
#include "distributed/call_tag.h"
#include "distributed/dist_support.h"
#include "support/expect.h"

namespace adjoint::testing {
namespace {

// "step 5 (DDP's gradient reduction)": how the error names a rank's step.
std::string reducing(int64_t step) {
  return "step " + std::to_string(step) + " (DDP's gradient reduction)";
}

// The same call at two steps, or in two phases of one step, is refused with both named; the
// same step and phase pass. Descriptors made here, checked as two ranks' would be.
TEST(StepCheck, DescriptorsOfDifferentStepsAreRefusedNamingBoth) {
  const Tensor t = zeros({4}, DType::Float32);
  auto describe = [&](int64_t step) {
    return dist::detail::describe_call(dist::CollectiveKind::AllReduce, dist::ReduceOp::Average, 0,
                                       t, true, step);
  };
  dist::CommRequest request;
  request.kind = dist::CollectiveKind::AllReduce;
  dist::CallDescriptor later, reducing_step_2;
  {
    const dist::detail::ScopedStepPhase phase(dist::detail::StepPhase::GradientReduction);
    later = describe(3);
    reducing_step_2 = describe(2);
  }
  for (int rank : {0, 1})
    expect_error(
        [&] {
          dist::detail::check_agreement(request, {describe(2), later}, rank);
        },
        ErrorKind::Value,
        {"[dist.all_reduce] ranks are out of step", "rank 0 step 2 (outside DDP and ZeRO)",
         "rank 1 " + reducing(3), "ProcessGroup::abort"});
  dist::CallDescriptor updating;
  {
    const dist::detail::ScopedStepPhase phase(dist::detail::StepPhase::ShardedUpdate);
    updating = describe(2);
  }
  expect_error(
      [&] {
        dist::detail::check_agreement(request, {reducing_step_2, updating}, 0);
      },
      ErrorKind::Value, {"rank 0 " + reducing(2), "rank 1 step 2 (ZeRO's update)"});
  dist::detail::check_agreement(request, {later, later}, 0);  // in step: no error
}

// The optimizer of a DDP model, plain (stage 0) or ZeRO, with the calls a training loop makes.
struct Training {
  std::shared_ptr<nn::MLP> model;
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<optim::SGD> sgd;
  std::unique_ptr<dist::ZeroOptimizer> zero;
  // Armed on one rank: the next post-accumulate-grad hook throws, inside backward, after
  // DDP's own hook on that parameter has run (DDP's hooks run first).
  bool fail_next_hook = false;

  explicit Training(int stage) : model(small_mlp(70, DType::Float64)) {
    // One bucket (the MLP is far below 1 MiB): it launches when the last gradient is final,
    // so a hook that throws at the first one leaves nothing launched.
    ddp = std::make_unique<dist::DistributedDataParallel>(*model,
                                                          dist::DdpOptions{.zero_stage = stage});
    if (stage == 0) {
      sgd = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1});
    } else {
      zero = std::make_unique<dist::ZeroOptimizer>(*ddp, [](const std::vector<Tensor>& shard) {
        return std::make_unique<optim::SGD>(shard, optim::SGDOptions{.lr = 0.1});
      });
    }
    for (const Tensor& p : model->parameters())
      p.register_post_accumulate_grad_hook([this](const Tensor&) {
        if (!fail_next_hook) return;
        fail_next_hook = false;
        throw Error(ErrorKind::Value, "test hook", "boom inside backward");
      });
  }
  void zero_grad() { zero ? zero->zero_grad() : sgd->zero_grad(); }
  void step() { zero ? zero->step() : sgd->step(); }
  // `fail_first`: the loss's own hook throws, before any parameter's gradient is final, so
  // DDP never sees that this backward ran.
  void backward(int data, bool fail_first = false) {
    const int r = pg().rank();
    Tensor loss = mse(*model, rank_input(r, {4, 3}, DType::Float64, data),
                      rank_input(r, {4, 2}, DType::Float64, data + 1));
    if (fail_first)
      loss.register_hook([](const Tensor&) -> Tensor {
        throw Error(ErrorKind::Value, "test hook", "boom before DDP's hooks");
      });
    loss.backward();
  }
};

// Every rank's pg().step(), rank order.
std::vector<int64_t> steps_of_every_rank() {
  return pg().all_gather(tensor(std::vector<int64_t>{pg().step()})).to_vector<int64_t>();
}

// Step 2 fails inside backward on rank 1, which catches the error and goes on with step 3
// while rank 0 is still reducing step 2's gradients: both ranks get the out-of-step error at
// that collective (rank 0 in step 2's backward, rank 1 in step 3's), naming both steps.
// Before the check, rank 1's step 3 gradients were averaged with rank 0's step 2 silently.
void rank_that_goes_on_fails_at_the_first_mixed_collective(int stage) {
  if (pg().world_size() != 2) GTEST_SKIP() << "needs two ranks (ctest mpi_step_check)";
  const int r = pg().rank();
  Training t(stage);
  const int64_t s0 = pg().step();
  t.zero_grad();
  t.backward(10);
  t.step();
  ASSERT_EQ(pg().step(), s0 + 1);

  const std::vector<std::string> out_of_step = {
      "ranks are out of step", "rank 0 " + reducing(s0 + 2), "rank 1 " + reducing(s0 + 3)};
  t.zero_grad();
  if (r == 1) {
    t.fail_next_hook = true;
    expect_error([&] { t.backward(20); }, ErrorKind::Value, {"boom inside backward"});
    EXPECT_EQ(pg().step(), s0 + 2) << "the failed run began step 2";
    t.zero_grad();  // goes on with step 3, skipping step 2's update
    expect_error([&] { t.backward(30); }, ErrorKind::Value, out_of_step);
  } else {
    expect_error([&] { t.backward(20); }, ErrorKind::Value, out_of_step);
  }
  // Each rank issued the same number of collectives (one bucket and the gradient count), so
  // the job can go on here once the steps are realigned, which a real job would not do.
  if (r == 0) pg().advance_step();
  EXPECT_EQ(steps_of_every_rank(), (std::vector<int64_t>{s0 + 3, s0 + 3}));
  t.zero_grad();
  t.backward(40);
  t.step();
  expect_same_on_every_rank(t.model->parameters());
}

TEST(StepCheck, RankThatGoesOnAfterAFailedBackwardFailsAtTheNextCollectivePlainDdp) {
  rank_that_goes_on_fails_at_the_first_mixed_collective(0);
}

TEST(StepCheck, RankThatGoesOnAfterAFailedBackwardFailsAtTheNextCollectiveZero1) {
  rank_that_goes_on_fails_at_the_first_mixed_collective(1);
}

TEST(StepCheck, RankThatGoesOnAfterAFailedBackwardFailsAtTheNextCollectiveZero2) {
  rank_that_goes_on_fails_at_the_first_mixed_collective(2);
}

// Rank 1 catches the error and takes the step's update anyway: its all-gather of the
// parameters meets rank 0's bucket of the same step, and the phases name the mix-up.
TEST(StepCheck, AZeroUpdateThatMeetsTheGradientReductionIsOutOfStep) {
  if (pg().world_size() != 2) GTEST_SKIP() << "needs two ranks (ctest mpi_step_check)";
  const int r = pg().rank();
  Training t(1);
  const int64_t s0 = pg().step();
  const std::vector<std::string> mixed = {
      "ranks are out of step", "rank 0 " + reducing(s0 + 1),
      "rank 1 step " + std::to_string(s0 + 1) + " (ZeRO's update)"};
  t.zero_grad();
  if (r == 1) {
    t.fail_next_hook = true;
    expect_error([&] { t.backward(50); }, ErrorKind::Value, {"boom inside backward"});
    expect_error([&] { t.step(); }, ErrorKind::Value, mixed);
    // Rank 0 issued one collective more (the gradient count): one more here keeps the job
    // going for the next tests.
    expect_error([&] { pg().barrier(); }, ErrorKind::Value, {"ranks are out of step"});
  } else {
    expect_error([&] { t.backward(50); }, ErrorKind::Value, mixed);
  }
  EXPECT_EQ(steps_of_every_rank(), (std::vector<int64_t>{s0 + 1, s0 + 1}));
  t.zero_grad();
  t.backward(60);
  t.step();
  expect_same_on_every_rank(t.model->parameters());
}

// A failure before DDP's first hook leaves DDP's count alone; a loop that begins each step
// itself (advance_step at its top, on every rank) still puts the failing rank one step ahead
// at its next collective, wherever in the step the failure was.
TEST(StepCheck, ALoopThatBeginsItsStepsCatchesAFailureBeforeDdpsHooks) {
  if (pg().world_size() != 2) GTEST_SKIP() << "needs two ranks (ctest mpi_step_check)";
  const int r = pg().rank();
  Training t(0);
  const int64_t s0 = pg().step();
  pg().advance_step();  // step 1: the loop's and DDP's
  t.zero_grad();
  t.backward(70);
  t.step();
  ASSERT_EQ(pg().step(), s0 + 2);

  const std::vector<std::string> out_of_step = {
      "ranks are out of step", "rank 0 " + reducing(s0 + 4), "rank 1 " + reducing(s0 + 5)};
  pg().advance_step();  // step 2
  t.zero_grad();
  if (r == 1) {
    expect_error([&] { t.backward(80, /*fail_first=*/true); }, ErrorKind::Value,
                 {"boom before DDP's hooks"});
    EXPECT_EQ(pg().step(), s0 + 3) << "DDP did not see this backward";
    pg().advance_step();  // goes on with step 3
    t.zero_grad();
    expect_error([&] { t.backward(90); }, ErrorKind::Value, out_of_step);
  } else {
    expect_error([&] { t.backward(80); }, ErrorKind::Value, out_of_step);
  }
  if (r == 0) pg().advance_step();  // realigned (a real job would end here)
  EXPECT_EQ(steps_of_every_rank(), (std::vector<int64_t>{s0 + 5, s0 + 5}));
  t.zero_grad();
  t.backward(100);
  t.step();
  expect_same_on_every_rank(t.model->parameters());
}

// The normal path: the step advances once per synchronising backward (not under no_sync, not
// for collectives outside DDP), alike on every rank, also across DDP objects on one group; a
// backward that fails on every rank keeps them in step; and the averages are the ranks' mean.
TEST(StepCheck, TheStepCountsSynchronisingBackwardRunsAlikeOnEveryRank) {
  const int n = pg().world_size();
  const int64_t s0 = pg().step();
  Training t(0);
  EXPECT_EQ(pg().step(), s0) << "constructing DDP (its broadcasts) is no step";
  for (int k = 1; k <= 3; ++k) {
    t.zero_grad();
    {
      auto guard = t.ddp->no_sync();
      t.backward(100 + k);
    }
    EXPECT_EQ(pg().step(), s0 + k - 1) << "no_sync does not communicate";
    t.backward(200 + k);
    EXPECT_EQ(pg().step(), s0 + k);
    Tensor other = ones({2});
    pg().all_reduce(other);  // a plain collective inside the step
    EXPECT_EQ(pg().step(), s0 + k);
    t.step();
  }
  t.zero_grad();
  t.fail_next_hook = true;  // on every rank: they stay in step
  expect_error([&] { t.backward(300); }, ErrorKind::Value, {"boom inside backward"});
  EXPECT_EQ(pg().step(), s0 + 4);

  Training second(0);  // another DDP on the same group continues the count
  second.zero_grad();
  second.backward(400);
  EXPECT_EQ(steps_of_every_rank(), std::vector<int64_t>(n, s0 + 5));
  // The average of the ranks' gradients, computed in one process.
  auto oracle = small_mlp(70, DType::Float64);
  const auto got = second.model->parameters(), want = oracle->parameters();
  std::vector<Tensor> sum(want.size());
  for (int q = 0; q < n; ++q) {
    oracle->zero_grad();
    mse(*oracle, rank_input(q, {4, 3}, DType::Float64, 400),
        rank_input(q, {4, 2}, DType::Float64, 401))
        .backward();
    for (std::size_t i = 0; i < want.size(); ++i)
      sum[i] = q == 0 ? want[i].grad().clone() : sum[i] + want[i].grad();
  }
  for (std::size_t i = 0; i < want.size(); ++i) expect_close(got[i].grad(), sum[i] / n, 1e-14);
}

}  // namespace
}  // namespace adjoint::testing
