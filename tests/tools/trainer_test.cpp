// The trainer behind adjoint-train: the loss goes down, the schedule's values, generation is
// reproducible, the loss plot is written (resuming: trainer_resume_test.cpp).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "gpt_trainer.h"
#include "support/expect.h"
#include "svg_plot.h"
#include "tools/trainer_test_util.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_error;
using adjoint::trainer_test::corpus;
using adjoint::trainer_test::tiny;
namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / (name + std::to_string(::getpid()))).string();
}

TEST(Trainer, LossGoesDownAndGenerationIsReproducible) {
  const data::ByteDataset data = corpus();
  tools::TrainConfig c = tiny();
  c.steps = 60;
  c.lr = 1e-2;
  tools::Trainer t(c, data);
  const double before = t.evaluate(data::Split::Train);
  EXPECT_NEAR(before, std::log(256.0), 0.3);  // uniform at initialisation
  for (int i = 0; i < 60; ++i) t.train_step();
  EXPECT_LT(t.evaluate(data::Split::Train), before - 1.5);
  Generator a(5), b(5);
  const std::string x = tools::generate(t.model(), "the ", 30, 0.8, 10, a);
  EXPECT_EQ(x.size(), 30u);
  EXPECT_EQ(x, tools::generate(t.model(), "the ", 30, 0.8, 10, b));
}

// --master-weights: the weights are bfloat16 from the start (the float32 initialisation
// rounded once), AdamW keeps float32 copies, and the run learns as the float32 one does; the
// checkpoint loads for sampling in bfloat16. Without a 16-bit precision it is refused.
TEST(Trainer, MasterWeightsTrainSixteenBitWeights) {
  const data::ByteDataset data = corpus();
  tools::TrainConfig c = tiny();
  c.steps = 60;
  c.lr = 1e-2;
  c.precision = "bf16";
  c.master_weights = true;
  tools::Trainer t(c, data);
  tools::TrainConfig f32 = c;
  f32.precision = "fp32";
  f32.master_weights = false;
  tools::Trainer reference(f32, data);
  const std::vector<Tensor> params = t.model().parameters();
  const std::vector<Tensor> initial = reference.model().parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    ASSERT_EQ(params[i].dtype(), DType::BFloat16);
    EXPECT_EQ((params[i].to(DType::Float32) - initial[i].to(DType::BFloat16).to(DType::Float32))
                  .abs()
                  .max()
                  .item<double>(),
              0.0)
        << "the float32 initialisation, rounded once";
  }
  const double before = t.evaluate(data::Split::Train);
  for (int i = 0; i < 60; ++i) {
    t.train_step();
    reference.train_step();
  }
  const double after = t.evaluate(data::Split::Train);
  EXPECT_LT(after, before - 1.5);
  EXPECT_NEAR(after, reference.evaluate(data::Split::Train), 0.15);
  for (const Tensor& p : t.model().parameters()) EXPECT_EQ(p.dtype(), DType::BFloat16);
  ASSERT_TRUE(t.optimizer().keeps_master_weights());
  EXPECT_EQ(t.optimizer().master_weight(0).dtype(), DType::Float32);

  const std::string path = temp_path("master_weights.safetensors");
  t.save(path);
  std::shared_ptr<nn::LanguageModel> loaded = tools::load_model(path);
  fs::remove(path);
  const std::vector<Tensor> lp = loaded->parameters();
  for (std::size_t i = 0; i < lp.size(); ++i) {
    ASSERT_EQ(lp[i].dtype(), DType::BFloat16);
    EXPECT_EQ((lp[i].to(DType::Float32) - params[i].to(DType::Float32)).abs().max().item<double>(),
              0.0);
  }

  tools::TrainConfig bad = tiny();
  bad.master_weights = true;
  expect_error([&] { tools::Trainer refused(bad, data); }, ErrorKind::Value,
               {"--master-weights", "--precision bf16 or fp16", "fp32"});
}

TEST(Trainer, ScheduleWarmsUpThenDecays) {
  tools::TrainConfig c = tiny();
  c.lr = 1.0;
  c.min_lr = 0.1;
  c.warmup = 4;
  c.steps = 14;
  EXPECT_DOUBLE_EQ(tools::learning_rate(c, 0), 0.25);
  EXPECT_DOUBLE_EQ(tools::learning_rate(c, 3), 1.0);
  EXPECT_DOUBLE_EQ(tools::learning_rate(c, 4), 1.0);
  EXPECT_NEAR(tools::learning_rate(c, 9), 0.1 + 0.45 * (1 + std::cos(M_PI * 0.5)), 1e-12);
  EXPECT_NEAR(tools::learning_rate(c, 14), 0.1, 1e-12);
}

// --checkpoint budget=BYTES plans on the first step (and prints the plan); the losses are
// those of the plain run, dropout included.
TEST(Trainer, CheckpointBudgetKeepsTheLosses) {
  const data::ByteDataset data = corpus();
  tools::TrainConfig c = tiny();
  c.model.dropout = 0.1;
  std::vector<double> plain, budgeted;
  {
    tools::Trainer t(c, data);
    for (int i = 0; i < 3; ++i) plain.push_back(t.train_step());
  }
  c.checkpoint = "budget=160K";
  {
    tools::Trainer t(c, data);
    t.evaluate(data::Split::Validation);  // no graph: runs the blocks plainly, plans nothing
    for (int i = 0; i < 3; ++i) budgeted.push_back(t.train_step());
  }
  EXPECT_EQ(plain, budgeted);
  c.checkpoint = "budget=lots";
  expect_error([&] { tools::Trainer t(c, data); }, ErrorKind::Value, {"[train]", "'lots'"});
  c.checkpoint = "budget=1K";
  tools::Trainer t(c, data);
  expect_error([&] { t.train_step(); }, ErrorKind::Value, {"[plan_checkpoints]", "budget of 1024"});
}

// --attention fused runs every block's attention as the fused op: the same function, so the
// losses of the math path (the oracle) within float32 rounding; the step keeps less for
// backward, since no [B, H, T, T] probabilities are saved. A bad value and math for a Llama
// are refused.
TEST(Trainer, FusedAttentionTrainsAsTheMathPathAndSavesLess) {
  const data::ByteDataset data = corpus();
  tools::TrainConfig c = tiny();
  auto run = [&](const std::string& attention, std::vector<double>& losses) {
    c.attention = attention;
    tools::Trainer t(c, data);
    auto& gpt = dynamic_cast<nn::GPT&>(t.model());
    for (const auto& block : gpt.blocks->children())
      EXPECT_EQ(std::dynamic_pointer_cast<nn::Block>(block)->attn->fused, attention == "fused");
    SavedMemoryTracker tracking;
    reset_peak_saved_memory_stats();
    for (int i = 0; i < 3; ++i) losses.push_back(t.train_step());
    return saved_memory_stats().peak_bytes;
  };
  std::vector<double> math, fused;
  const std::size_t math_saved = run("math", math);
  const std::size_t fused_saved = run("fused", fused);
  ASSERT_EQ(math.size(), fused.size());
  for (std::size_t i = 0; i < math.size(); ++i) EXPECT_NEAR(fused[i], math[i], 1e-5) << i;
  EXPECT_LT(fused_saved, math_saved);
  c.attention = "flash";
  expect_error([&] { tools::Trainer t(c, data); }, ErrorKind::Value,
               {"[train]", "--attention must be math or fused", "'flash'"});
  c.arch = "llama";
  c.attention = "math";
  expect_error([&] { tools::Trainer t(c, data); }, ErrorKind::Value,
               {"[train]", "--attention math is a GPT's"});
}

TEST(SvgPlot, WritesAPlot) {
  const std::string path = temp_path("adjoint_plot_") + ".svg";
  tools::write_svg_plot(path, "t", "x", "y", {{"a", {0, 1, 2}, {3, 1, 2}}});
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<polyline"), std::string::npos);
  EXPECT_NE(text.find("</svg>"), std::string::npos);
  fs::remove(path);
  expect_error([] { tools::write_svg_plot("/no/such/dir/p.svg", "t", "x", "y", {}); },
               ErrorKind::IO, {"svg_plot"});
}

}  // namespace
