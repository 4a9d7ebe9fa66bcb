// adjoint-train's flags as values: every numeric flag out of range is an Error naming the flag
// and its value (and the defaults pass); --min-lr's default follows a lower --lr; the thread
// count of a run and a resume; and the durations of the progress line, huge ones included.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "support/expect.h"
#include "train_flags.h"

namespace adjoint::testing {
namespace {

using tools::TrainFlags;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(TrainFlags, TheDefaultsPass) { tools::check_flags(TrainFlags{}); }

// One bad value at a time, each refused with the flag and the value in the message.
TEST(TrainFlags, EveryNumericFlagOutOfRangeIsNamedWithItsValue) {
  struct Case {
    void (*set)(TrainFlags&);
    std::vector<std::string> parts;
  };
  const Case cases[] = {
      {[](TrainFlags& f) { f.config.model.layers = 0; }, {"--layers", "positive", "got 0"}},
      {[](TrainFlags& f) { f.config.model.d_model = -8; }, {"--width", "got -8"}},
      {[](TrainFlags& f) { f.config.model.heads = 0; }, {"--heads", "got 0"}},
      {[](TrainFlags& f) { f.config.model.context = 0; }, {"--context", "got 0"}},
      {[](TrainFlags& f) { f.config.batch = -1; }, {"--batch", "got -1"}},
      {[](TrainFlags& f) { f.config.steps = 0; }, {"--steps", "got 0"}},
      {[](TrainFlags& f) { f.config.warmup = -1; }, {"--warmup", ">= 0", "got -1"}},
      {[](TrainFlags& f) { f.config.lr = -0.001; }, {"--lr", "finite number >= 0", "got -0.001"}},
      {[](TrainFlags& f) { f.config.lr = kNaN; }, {"--lr", "got nan"}},
      {[](TrainFlags& f) { f.config.lr = kInf; }, {"--lr", "got inf"}},
      {[](TrainFlags& f) { f.config.min_lr = -1; }, {"--min-lr", ">= 0", "got -1"}},
      {[](TrainFlags& f) { f.config.min_lr = kNaN; }, {"--min-lr", "got nan"}},
      {[](TrainFlags& f) { f.config.weight_decay = -0.1; }, {"--weight-decay", "got -0.1"}},
      {[](TrainFlags& f) { f.config.init_loss_scale = 0; }, {"--loss-scale", "> 0", "got 0"}},
      {[](TrainFlags& f) { f.config.init_loss_scale = kInf; }, {"--loss-scale", "got inf"}},
      {[](TrainFlags& f) { f.config.eval_every = 0; }, {"--eval-every", "got 0"}},
      {[](TrainFlags& f) { f.config.save_every = -5; }, {"--save-every", "got -5"}},
      {[](TrainFlags& f) { f.stop_after = -1; }, {"--stop-after", "got -1"}},
      {[](TrainFlags& f) { f.sample_length = -2; }, {"--sample-length", "got -2"}},
      {[](TrainFlags& f) { f.profile_step = -3; }, {"--profile", "got -3"}},
      {[](TrainFlags& f) { f.threads = -4; }, {"--threads", "got -4"}},
      {[](TrainFlags& f) { f.zero = 3; }, {"--zero", "0, 1 or 2", "got 3"}},
      {[](TrainFlags& f) { f.health.every = -1; }, {"--grad-every", "got -1"}},
      {[](TrainFlags& f) { f.health.vanish_below = kNaN; }, {"--grad-vanish", "got nan"}},
      {[](TrainFlags& f) { f.health.vanish_records = 0; }, {"--grad-vanish-records", "got 0"}},
      {[](TrainFlags& f) { f.health.explode_above = -1; }, {"--grad-explode", "got -1"}},
      {[](TrainFlags& f) { f.health.explode_above = 1e-7; },
       {"--grad-explode 1e-07 must be above --grad-vanish 1e-06"}},
      {[](TrainFlags& f) { f.config.model.heads = 3; },
       {"--width 128 must be a multiple of --heads 3"}},
      {[](TrainFlags& f) { f.config.attention = "flash"; },
       {"--attention must be math or fused, got 'flash'"}},
      {[](TrainFlags& f) {
         f.config.arch = "llama";
         f.config.attention = "math";
       },
       {"--attention math is a GPT's"}},
      {[](TrainFlags& f) { f.config.min_lr = 0.01; },
       {"--min-lr 0.01 is above --lr 0.003", "at most --lr"}},
  };
  for (const Case& c : cases) {
    TrainFlags f;
    c.set(f);
    expect_error([&] { tools::check_flags(f); }, ErrorKind::Value, c.parts);
  }
}

// A resume takes the settings left out from the checkpoint, so the relations between run
// settings, which the defaults may not meet with the checkpoint's values, are not checked
// there; each given value's own range is.
TEST(TrainFlags, AResumeChecksRangesButNotRelationsOfTheDefaults) {
  TrainFlags f;
  f.resume = "out/checkpoint.safetensors";
  f.config.model.heads = 3;  // given, with a checkpoint of width 96
  f.config.min_lr = 0.01;
  tools::check_flags(f);
  f.config.min_lr = -1;
  expect_error([&] { tools::check_flags(f); }, ErrorKind::Value, {"--min-lr", "got -1"});
}

TEST(TrainFlags, MinLrLeftOutFollowsALowerLr) {
  auto nothing_given = [](std::string_view) { return false; };
  TrainFlags f;
  f.config.lr = 1e-4;
  tools::settle_defaults(f, nothing_given);
  EXPECT_EQ(f.config.min_lr, 1e-4);
  tools::check_flags(f);

  TrainFlags higher;  // the default lr, 3e-3: the default min-lr 3e-4 stays
  tools::settle_defaults(higher, nothing_given);
  EXPECT_EQ(higher.config.min_lr, 3e-4);

  TrainFlags explicit_min;  // given: kept, and then refused
  explicit_min.config.lr = 1e-4;
  tools::settle_defaults(explicit_min, [](std::string_view flag) { return flag == "--min-lr"; });
  EXPECT_EQ(explicit_min.config.min_lr, 3e-4);
  expect_error([&] { tools::check_flags(explicit_min); }, ErrorKind::Value, {"--min-lr 0.0003"});

  TrainFlags resumed;  // a resume's min-lr comes from the checkpoint
  resumed.resume = "ckpt";
  resumed.config.lr = 1e-4;
  tools::settle_defaults(resumed, nothing_given);
  EXPECT_EQ(resumed.config.min_lr, 3e-4);
}

TEST(TrainFlags, ThreadsOfARunAndOfAResume) {
  using tools::threads_for_run;
  EXPECT_EQ(threads_for_run(std::nullopt, std::nullopt, 16, 1), 0) << "one process: all cores";
  EXPECT_EQ(threads_for_run(std::nullopt, std::nullopt, 16, 4), 4) << "cores shared by 4 ranks";
  EXPECT_EQ(threads_for_run(3, std::nullopt, 16, 1), 3);
  EXPECT_EQ(threads_for_run(3, 5, 16, 1), 3) << "--threads beats the checkpoint";
  EXPECT_EQ(threads_for_run(std::nullopt, 5, 16, 1), 5) << "a resume keeps the checkpoint's";
  EXPECT_EQ(threads_for_run(std::nullopt, 5, 16, 4), 4) << "at most the ranks' share";
  EXPECT_EQ(threads_for_run(std::nullopt, 64, 8, 1), 8) << "at most the cores";
  EXPECT_EQ(threads_for_run(std::nullopt, 5, 0, 1), 5) << "cores unknown: no cap";
  EXPECT_EQ(threads_for_run(0, 5, 16, 1), 0) << "--threads 0 given: all cores";
  EXPECT_EQ(threads_for_run(0, 5, 16, 2), 8);
  EXPECT_EQ(threads_for_run(std::nullopt, std::nullopt, 1, 4), 1) << "never 0 threads per rank";
}

TEST(TrainFlags, DurationsFromSecondsToYears) {
  using tools::format_duration;
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(42.4), "42s");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(3 * 60 + 7), "3m07s");
  EXPECT_EQ(format_duration(5 * 3600 + 3 * 60 + 20), "5h03m");
  EXPECT_EQ(format_duration(12 * 86400 + 5 * 3600 + 100), "12d05h");
  EXPECT_EQ(format_duration(364 * 86400.0), "364d00h");
  // Past an int of seconds (2^31 s, 68 years), where the old text read -2147483648s.
  const double year = 365.25 * 86400;
  EXPECT_EQ(format_duration(std::ldexp(1.0, 31)), "68y");
  EXPECT_EQ(format_duration(31710 * year), "31710y");
  EXPECT_EQ(format_duration(1e30), ">999999999y");
  EXPECT_EQ(format_duration(kNaN), "--");
  EXPECT_EQ(format_duration(kInf), "--");
  EXPECT_EQ(format_duration(-1), "--");
}

}  // namespace
}  // namespace adjoint::testing
