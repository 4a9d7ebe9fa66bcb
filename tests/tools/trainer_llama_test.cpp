// adjoint-train's --arch llama through the Trainer: the loss goes down, a checkpoint loads back
// as the same Llama (its kv_heads too) for sampling, generation with the key/value cache gives
// the text that recomputing the window gives, and a resume refuses another architecture.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "gpt_trainer.h"
#include "run_state.h"
#include "support/expect.h"
#include "tools/trainer_test_util.h"
#include "train_flags.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_error;
using adjoint::trainer_test::corpus;
namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / (name + std::to_string(::getpid()))).string();
}

tools::TrainConfig tiny_llama() {
  tools::TrainConfig c = adjoint::trainer_test::tiny();
  c.arch = "llama";
  c.model.heads = 4;  // head dim 4, even for RoPE
  c.kv_heads = 2;
  return c;
}

}  // namespace

TEST(TrainerLlama, LossGoesDown) {
  const data::ByteDataset data = corpus();
  tools::TrainConfig c = tiny_llama();
  c.steps = 60;
  c.lr = 1e-2;
  tools::Trainer t(c, data);
  auto* llama = dynamic_cast<nn::Llama*>(&t.model());
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(llama->config().kv_heads, 2);
  EXPECT_EQ(llama->layers->at<nn::LlamaBlock>(0)->attention->wk->weight.shape(),
            (Shape{2 * 4, 16}));
  const double before = t.evaluate(data::Split::Train);
  EXPECT_NEAR(before, std::log(256.0), 0.3);  // near uniform at initialisation
  for (int i = 0; i < 60; ++i) t.train_step();
  EXPECT_LT(t.evaluate(data::Split::Train), before - 1.5);
}

TEST(TrainerLlama, CheckpointLoadsAsTheSameLlamaAndCachedSamplingMatches) {
  const data::ByteDataset data = corpus();
  tools::TrainConfig c = tiny_llama();
  c.lr = 1e-2;
  tools::Trainer t(c, data);
  for (int i = 0; i < 8; ++i) t.train_step();
  const std::string path = temp_path("llama.safetensors");
  t.save(path);
  std::shared_ptr<nn::LanguageModel> loaded = tools::load_model(path);
  const tools::RunState state = tools::read_run_state(path);
  fs::remove(path);
  EXPECT_EQ(state.config.arch, "llama");
  EXPECT_EQ(state.config.kv_heads, 2);
  auto* llama = dynamic_cast<nn::Llama*>(loaded.get());
  ASSERT_NE(llama, nullptr);
  EXPECT_EQ(llama->config().kv_heads, 2);
  const auto want = t.model().named_parameters(), got = loaded->named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.to_vector<float>(), want[i].second.to_vector<float>()) << got[i].first;
  }
  // Prompt and sample within the context (16): the cache gives what recomputation gives, draw
  // for draw (the same generator, near-identical logits).
  Generator a(7), b(7);
  const std::string cached = tools::generate(*loaded, "the q", 11, 0.8, 10, a, true);
  const std::string plain = tools::generate(*loaded, "the q", 11, 0.8, 10, b, false);
  EXPECT_EQ(cached.size(), 11u);
  EXPECT_EQ(cached, plain);
  // Past the context the cache restarts from the last context / 2 bytes: still that many bytes.
  Generator g(8);
  EXPECT_EQ(tools::generate(*loaded, "the quick brown fox", 40, 0.8, 10, g).size(), 40u);
}

TEST(TrainerLlama, ResumeRefusesAnotherArchitecture) {
  const data::ByteDataset data = corpus();
  tools::TrainConfig c = tiny_llama();
  tools::Trainer t(c, data);
  t.train_step();
  const std::string path = temp_path("llama_resume.safetensors");
  t.save(path);
  tools::TrainConfig gpt = adjoint::trainer_test::tiny();
  gpt.model.heads = 4;
  tools::Trainer other(gpt, data);
  expect_error([&] { other.resume(path); }, ErrorKind::Value, {"--arch", "llama", "gpt"});
  tools::TrainConfig fewer = c;
  fewer.kv_heads = 1;
  tools::Trainer third(fewer, data);
  expect_error([&] { third.resume(path); }, ErrorKind::Value, {"--kv-heads", "2", "1"});
  tools::Trainer same(c, data);
  same.resume(path);
  EXPECT_EQ(same.step(), 1);
  fs::remove(path);
}

TEST(TrainerLlama, FlagErrors) {
  tools::TrainFlags f;
  f.config.arch = "mamba";
  expect_error([&] { tools::check_flags(f); }, ErrorKind::Value, {"--arch", "mamba"});
  f.config = tiny_llama();
  f.config.kv_heads = 3;
  expect_error([&] { tools::check_flags(f); }, ErrorKind::Value, {"--kv-heads 3", "--heads 4"});
  f.config = tiny_llama();
  f.config.model.d_model = 12;  // head dim 3
  expect_error([&] { tools::check_flags(f); }, ErrorKind::Value, {"--width 12", "even"});
}
