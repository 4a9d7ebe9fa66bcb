// adjoint-train's Trainer on several ranks: data parallel and ZeRO stages 1 and 2 follow one
// process training on the whole batch (the oracle, run here too); a checkpoint saved under N
// ranks resumes bit for bit under N ranks, and under one process or another ZeRO stage within
// float32 rounding. Label unit (one process) and mpi (two ranks).
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <string>

#include "distributed/dist_support.h"
#include "support/expect.h"
#include "tools/trainer_test_util.h"

namespace adjoint::testing {
namespace {

using trainer_test::corpus;
using trainer_test::tiny;

// float32 weights after a few AdamW steps: the ranks sum a gradient in another order than one
// process, and AdamW divides each element's momentum by its own scale, so an element whose
// gradient is at rounding level can move by a visible share of the learning rate (3e-3) either
// way. The losses agree to 1e-5; the weights to about 1 % of one step.
constexpr double kWeightTol = 1e-4;

tools::ParallelOptions on_ranks(int zero) { return {.group = &pg(), .zero = zero}; }

// A file name every rank agrees on: rank 0's process id.
std::string shared_path(const std::string& stem) {
  Tensor pid = full({1}, static_cast<int64_t>(::getpid()), DType::Int64);
  pg().broadcast(pid, 0);
  return (std::filesystem::temp_directory_path() /
          (stem + "_" + std::to_string(pid.item<int64_t>()) + ".safetensors"))
      .string();
}

void expect_same_weights(tools::Trainer& a, tools::Trainer& b, double tol) {
  auto pa = a.model().parameters(), pb = b.model().parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) expect_close(pa[i].detach(), pb[i].detach(), tol);
}

// `steps` steps of both: the same losses (float32 rounding aside), then the same weights.
void expect_follows(tools::Trainer& ranks, tools::Trainer& single, int steps) {
  for (int step = 0; step < steps; ++step) {
    const double got = ranks.train_step(), want = single.train_step();
    EXPECT_NEAR(got, want, 1e-5 * std::abs(want)) << "step " << step;
  }
  expect_same_weights(ranks, single, kWeightTol);
}

class ParallelTrainer : public ::testing::TestWithParam<int> {};

TEST_P(ParallelTrainer, FollowsOneProcessWithTheWholeBatch) {
  const int zero = GetParam();
  const auto data = corpus();
  tools::Trainer ranks(tiny(), data, on_ranks(zero));
  tools::Trainer single(tiny(), data);
  expect_follows(ranks, single, 4);
}

// The memory-budget planner checkpoints blocks (planned on the first step, the same on every
// rank); the gradients, and so the steps, are those of one process without checkpointing.
TEST_P(ParallelTrainer, WorksWithTheMemoryBudgetPlanner) {
  const int zero = GetParam();
  const auto data = corpus();
  tools::TrainConfig c = tiny();
  // Under the smallest plan's peak of saved activations without checkpointing (each rank
  // saves for its share of the batch), so that the plan checkpoints blocks.
  c.checkpoint = "budget=" + std::to_string(90000 / pg().world_size());
  tools::Trainer ranks(c, data, on_ranks(zero));
  tools::Trainer single(tiny(), data);
  expect_follows(ranks, single, 3);
}

TEST_P(ParallelTrainer, ResumesUnderAnyWorldSizeAndStage) {
  const int zero = GetParam();
  const auto data = corpus();
  const std::string path = shared_path("adjoint_parallel_trainer_z" + std::to_string(zero));
  tools::Trainer first(tiny(), data, on_ranks(zero));
  for (int step = 0; step < 3; ++step) first.train_step();
  first.save(path);
  pg().barrier();  // rank 0 has written it
  std::vector<double> went_on;
  for (int step = 3; step < 6; ++step) went_on.push_back(first.train_step());

  tools::Trainer same(tiny(), data, on_ranks(zero));
  same.resume(path);
  for (int step = 3; step < 6; ++step)
    EXPECT_EQ(same.train_step(), went_on[step - 3]) << "same ranks and stage, step " << step;
  expect_same_weights(same, first, 0);

  tools::Trainer other_stage(tiny(), data, on_ranks((zero + 1) % 3));
  other_stage.resume(path);
  tools::Trainer alone(tiny(), data);
  alone.resume(path);
  for (int step = 3; step < 6; ++step) {
    const double want = went_on[step - 3];
    EXPECT_NEAR(other_stage.train_step(), want, 1e-5 * std::abs(want)) << "step " << step;
    EXPECT_NEAR(alone.train_step(), want, 1e-5 * std::abs(want)) << "step " << step;
  }
  expect_same_weights(alone, first, kWeightTol);
  expect_same_weights(other_stage, first, kWeightTol);
  pg().barrier();
  if (pg().rank() == 0) std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Zero, ParallelTrainer, ::testing::Values(0, 1, 2),
                         [](const auto& info) { return "stage" + std::to_string(info.param); });

// fp16 with the GradScaler: the first steps overflow at the initial scale of 2^16 and are
// skipped; every stage skips the same steps as one process (under ZeRO each rank sees only its
// shard, and the ranks combine their flags).
TEST_P(ParallelTrainer, Float16SkipsTheSameStepsAsOneProcess) {
  const int zero = GetParam();
  const auto data = corpus();
  tools::TrainConfig c = tiny();
  c.precision = "fp16";
  c.init_loss_scale = 1e30;  // overflows for sure, then backs off
  tools::Trainer ranks(c, data, on_ranks(zero));
  tools::Trainer single(c, data);
  for (int step = 0; step < 4; ++step) {
    const double got = ranks.train_step(), want = single.train_step();
    EXPECT_NEAR(got, want, 1e-3 * std::abs(want)) << "step " << step;
    EXPECT_EQ(ranks.last_step_skipped(), single.last_step_skipped()) << "step " << step;
  }
  EXPECT_GT(single.skipped_steps(), 0);
  EXPECT_EQ(ranks.skipped_steps(), single.skipped_steps());
  EXPECT_EQ(ranks.loss_scale(), single.loss_scale());
}

TEST(ParallelTrainerErrors, BatchMustSplitEvenlyAndZeroNeedsAGroup) {
  const auto data = corpus();
  tools::TrainConfig c = tiny();
  c.batch = 2 * pg().world_size() + 1;
  if (pg().world_size() > 1)
    expect_error([&] { tools::Trainer t(c, data, on_ranks(0)); }, ErrorKind::Value,
                 {"[train]", "multiple of the number of ranks"});
  expect_error([&] { tools::Trainer t(tiny(), data, {.group = nullptr, .zero = 2}); },
               ErrorKind::Value, {"[train]", "process group"});
  expect_error([&] { tools::Trainer t(tiny(), data, on_ranks(3)); }, ErrorKind::Value,
               {"[train]", "--zero must be 0, 1 or 2"});
}

}  // namespace
}  // namespace adjoint::testing
