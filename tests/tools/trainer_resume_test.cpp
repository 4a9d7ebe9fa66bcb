// Resuming the trainer behind adjoint-train. The oracle is the uninterrupted run: a run stopped
// inside the cosine decay and resumed must reproduce its every loss, learning rate and final
// weight bit for bit (with dropout, and with another checkpointing mode). A checkpoint whose
// settings or data contradict the trainer's is refused naming the flag and both values, and
// malformed metadata is a named error that leaves the trainer untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <ostream>

#include "gpt_trainer.h"
#include "io/io_test_util.h"
#include "run_state.h"
#include "support/expect.h"
#include "tools/trainer_test_util.h"

namespace {

using namespace adjoint;
using adjoint::io_test::TempDir;
using adjoint::testing::expect_error;
using adjoint::trainer_test::corpus;
using adjoint::trainer_test::tiny;

// 20 steps, 3 of warmup: step 11 is well inside the decay.
tools::TrainConfig decaying() {
  tools::TrainConfig c = tiny();
  c.steps = 20;
  c.warmup = 3;
  return c;
}

std::vector<std::vector<float>> weights(tools::Trainer& t) {
  std::vector<std::vector<float>> out;
  for (const Tensor& p : t.model().parameters()) out.push_back(p.to_vector<float>());
  return out;
}

// Runs `n` steps, recording each step's learning rate and loss.
void run(tools::Trainer& t, int64_t n, std::vector<double>& lrs, std::vector<double>& losses) {
  for (int64_t i = 0; i < n; ++i) {
    lrs.push_back(tools::learning_rate(t.config(), t.step()));
    losses.push_back(t.train_step());
  }
}

struct ResumeCase {
  double dropout;
  std::string resume_checkpointing;  // the activation checkpointing mode after the resume
};

void PrintTo(const ResumeCase& c, std::ostream* os) {
  *os << "dropout " << c.dropout << ", resumed with --checkpoint " << c.resume_checkpointing;
}

class TrainerResume : public ::testing::TestWithParam<ResumeCase> {};

TEST_P(TrainerResume, InTheDecayMatchesAnUninterruptedRun) {
  const data::ByteDataset data = corpus();
  tools::TrainConfig c = decaying();
  c.model.dropout = GetParam().dropout;
  const int64_t k = 11;
  ASSERT_LT(tools::learning_rate(c, k), c.lr);            // past the warmup,
  ASSERT_GT(tools::learning_rate(c, k), c.min_lr * 1.5);  // well before the end of the decay

  std::vector<double> lrs, losses;
  tools::Trainer straight(c, data);
  run(straight, c.steps, lrs, losses);

  TempDir dir;
  const std::string ckpt = dir.file("ckpt.safetensors");
  std::vector<double> lrs2, losses2, ignored_lrs, ignored_losses;
  {
    tools::Trainer first(c, data);
    run(first, k, lrs2, losses2);
    first.save(ckpt);
    run(first, 4, ignored_lrs, ignored_losses);  // runs on past the checkpoint: discarded
  }
  tools::TrainConfig again = c;
  again.checkpoint = GetParam().resume_checkpointing;  // may differ: the same values
  tools::Trainer second(again, data);
  second.resume(ckpt);
  EXPECT_EQ(second.step(), k);
  run(second, c.steps - k, lrs2, losses2);

  ASSERT_EQ(losses2.size(), losses.size());
  for (std::size_t i = 0; i < losses.size(); ++i) {
    EXPECT_EQ(lrs2[i], lrs[i]) << "learning rate of step " << i;
    EXPECT_EQ(losses2[i], losses[i]) << "loss of step " << i;  // bitwise: no tolerance
  }
  EXPECT_EQ(weights(second), weights(straight));
}

INSTANTIATE_TEST_SUITE_P(Trainer, TrainerResume,
                         ::testing::Values(ResumeCase{0.0, "none"}, ResumeCase{0.1, "none"},
                                           ResumeCase{0.0, "block"}, ResumeCase{0.1, "sqrt"}),
                         [](const auto& info) {
                           return std::string(info.param.dropout > 0 ? "Dropout" : "NoDropout") +
                                  "_" + info.param.resume_checkpointing;
                         });

// A checkpoint of one run, and a trainer that has not stepped yet.
struct Fixture {
  data::ByteDataset data = corpus();
  TempDir dir;
  std::string ckpt = dir.file("ckpt.safetensors");
  Fixture() {
    tools::Trainer t(decaying(), data);
    for (int i = 0; i < 11; ++i) t.train_step();
    t.save(ckpt);
  }
};

// The trainer's weights and step are those it was built with.
void expect_untouched(tools::Trainer& t, const std::vector<std::vector<float>>& before) {
  EXPECT_EQ(t.step(), 0);
  EXPECT_EQ(weights(t), before);
}

// The audit's reproducer: the schedule spans `steps`, so a resume with another --steps (a
// run of 11 steps "extended" to 20) silently ran a different learning rate. Every setting
// the trajectory depends on is refused the same way.
TEST(TrainerResume, RefusesSettingsThatContradictTheCheckpoint) {
  Fixture f;
  struct Case {
    std::function<void(tools::TrainConfig&)> change;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {[](auto& c) { c.steps = 40; }, {"--steps is 20 in the checkpoint but 40 was given"}},
      {[](auto& c) { c.lr = 1e-3; }, {"--lr is 0.003 in the checkpoint but 0.001 was given"}},
      {[](auto& c) { c.min_lr = 0; }, {"--min-lr is 3e-04", "but 0 was given"}},
      {[](auto& c) { c.warmup = 5; }, {"--warmup is 3", "but 5"}},
      {[](auto& c) { c.weight_decay = 0; }, {"--weight-decay is 0.1", "but 0"}},
      {[](auto& c) { c.batch = 8; }, {"--batch is 4", "but 8"}},
      {[](auto& c) { c.seed = 4; }, {"--seed is 3", "but 4"}},
      {[](auto& c) { c.model.d_model = 32; }, {"--width is 16", "but 32"}},
      {[](auto& c) { c.model.heads = 4; }, {"--heads is 2", "but 4"}},
      {[](auto& c) { c.model.layers = 1; }, {"--layers is 2", "but 1"}},
      {[](auto& c) { c.model.context = 8; }, {"--context is 16", "but 8"}},
      {[](auto& c) { c.grad_clip = 0.5; }, {"grad_clip is 1", "but 0.5"}},
      {[](auto& c) { c.eval_batches = 3; }, {"eval_batches is 2", "but 3"}},
      {[](auto& c) { c.model.dropout = 0.1; }, {"dropout is 0", "but 0.1"}},
  };
  for (const Case& k : cases) {
    tools::TrainConfig c = decaying();
    k.change(c);
    tools::Trainer t(c, f.data);
    const auto before = weights(t);
    std::vector<std::string> parts = k.parts;
    parts.insert(parts.begin(), "[train]");
    parts.push_back("ckpt.safetensors");
    expect_error([&] { t.resume(f.ckpt); }, ErrorKind::Value, parts);
    expect_untouched(t, before);
  }
  // Another corpus: same settings, other bytes.
  const data::ByteDataset other = corpus("pack my box with five dozen liquor jugs. ");
  tools::Trainer t(decaying(), other);
  const auto before = weights(t);
  expect_error([&] { t.resume(f.ckpt); }, ErrorKind::Value,
               {"[train]", "--data differs", "FNV-1a 64"});
  expect_untouched(t, before);
}

// What only changes how the run executes may differ.
TEST(TrainerResume, AllowsSettingsThatDoNotShapeTheRun) {
  Fixture f;
  tools::TrainConfig c = decaying();
  c.checkpoint = "block";
  c.eval_every = 7;
  c.save_every = 3;
  c.data = "/elsewhere/corpus.txt";
  tools::Trainer t(c, f.data);
  t.resume(f.ckpt);
  EXPECT_EQ(t.step(), 11);
}

// The metadata of f.ckpt with one key changed ("" as value: erased), written to a new file.
std::string with_metadata(const Fixture& f, const std::string& key, const std::string* value,
                          const std::string& name) {
  io::SafetensorsFile file = io::load_safetensors(f.ckpt);
  if (value) {
    file.metadata[key] = *value;
  } else {
    file.metadata.erase(key);
  }
  const std::string path = f.dir.file(name);
  io::save_safetensors(path, file.tensors, file.metadata);
  return path;
}

// Each malformed or missing key is an IO error naming the key, its value and what was
// expected, found before any weight is copied. (The audit's reproducers: data_gen.s0 "abc"
// escaped as std::invalid_argument, "999...9" as std::out_of_range, and step "-5" was taken.)
TEST(TrainerResume, RejectsMalformedMetadataBeforeTouchingTheModel) {
  Fixture f;
  struct Case {
    std::string key;
    std::optional<std::string> value;  // nullopt: the key is removed
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"data_gen.s0", "abc", {"'data_gen.s0' is \"abc\"", "unsigned 64-bit integer"}},
      {"data_gen.s0", "99999999999999999999999", {"'data_gen.s0'", "unsigned 64-bit"}},
      {"data_gen.s0", "-1", {"'data_gen.s0' is \"-1\""}},
      {"data_gen.s0", " 1", {"'data_gen.s0' is \" 1\""}},
      {"step", "-5", {"'step' is \"-5\"", "from 0 to 20"}},
      {"step", "21", {"'step' is \"21\"", "from 0 to 20"}},
      {"step", "11abc", {"'step' is \"11abc\""}},
      {"step", "", {"'step' is \"\""}},
      {"step", "10", {"'step' is 10", "optimizer's step count", "is 11"}},
      {"step", std::nullopt, {"no 'step' in its metadata"}},
      {"steps", "0", {"'steps' is \"0\"", ">= 1"}},
      {"steps", "1e3", {"'steps' is \"1e3\""}},
      {"lr", "nan", {"'lr' is \"nan\"", "finite number >= 0"}},
      {"lr", "-0.1", {"'lr' is \"-0.1\""}},
      {"lr", "1e999", {"'lr' is \"1e999\""}},
      {"dropout", "1", {"'dropout' is \"1\"", "< 1"}},
      {"seed", "x", {"'seed' is \"x\""}},
      {"threads", "0", {"'threads' is \"0\""}},
      {"data_gen.has_cached", "yes", {"'data_gen.has_cached' is \"yes\"", "0 or 1"}},
      {"data_gen.cached_normal", "inf", {"'data_gen.cached_normal' is \"inf\""}},
      {"data_gen.seed", "8", {"'data_gen.seed' is \"8\"", "7 (2 * seed + 1)"}},
      {"data.fnv1a64", "xyz", {"'data.fnv1a64'", "16 hexadecimal digits"}},
      {"data.train_bytes", "999999", {"'data.train_bytes'", "at most data.bytes"}},
      {"version", "3", {"'version' is \"3\"", "from 2 to 2"}},
      {"version", std::nullopt, {"older adjoint-train", "adjoint-sample reads it"}},
      {"format", "other", {"not a checkpoint of adjoint-train"}},
      {"dropout_gen.s0", "1", {"'dropout_gen.s0' is not of the form"}},
      {"dropout_gen.blocks.0.drop.s0", "1", {"no 'dropout_gen.blocks.0.drop.s1'"}},
  };
  int n = 0;
  for (const Case& k : cases) {
    const std::string path = with_metadata(f, k.key, k.value ? &*k.value : nullptr,
                                           "bad" + std::to_string(n++) + ".safetensors");
    tools::Trainer t(decaying(), f.data);
    const auto before = weights(t);
    std::vector<std::string> parts = k.parts;
    parts.insert(parts.begin(), "[train]");
    expect_error([&] { t.resume(path); }, ErrorKind::IO, parts);
    expect_untouched(t, before);
    t.resume(f.ckpt);  // the trainer still works with the good file
    EXPECT_EQ(t.step(), 11);
  }
  // Both halves of the generator state zero: xoroshiro would draw zeros forever.
  io::SafetensorsFile file = io::load_safetensors(f.ckpt);
  file.metadata["data_gen.s0"] = file.metadata["data_gen.s1"] = "0";
  io::save_safetensors(f.dir.file("zero.safetensors"), file.tensors, file.metadata);
  tools::Trainer t(decaying(), f.data);
  expect_error([&] { t.resume(f.dir.file("zero.safetensors")); }, ErrorKind::IO,
               {"'data_gen.s1' is \"0\"", "not zero when data_gen.s0 is zero"});
}

// A checkpoint of an older adjoint-train (the model's shape and the step only): adjoint-sample
// still loads it; a resume is refused because the run's settings are unknown.
TEST(TrainerResume, OlderCheckpointsLoadForSamplingOnly) {
  Fixture f;
  io::SafetensorsFile file = io::load_safetensors(f.ckpt);
  io::Metadata old;
  for (const char* key : {"format", "vocab", "context", "d_model", "heads", "layers", "step"})
    old[key] = file.metadata.at(key);
  io::save_safetensors(f.dir.file("old.safetensors"), file.tensors, old);
  auto model = tools::load_model(f.dir.file("old.safetensors"));
  EXPECT_EQ(dynamic_cast<nn::GPT&>(*model).config().d_model, 16);
  tools::Trainer t(decaying(), f.data);
  expect_error([&] { t.resume(f.dir.file("old.safetensors")); }, ErrorKind::IO,
               {"older adjoint-train", "cannot be resumed exactly"});
}

// Doubles travel as text in their shortest exact form: every bit comes back.
TEST(RunState, RoundTripsExactly) {
  tools::RunState s;
  s.config = decaying();
  s.config.lr = 0.1 + 0.2;   // 0.30000000000000004
  s.config.min_lr = 5e-324;  // the smallest subnormal
  s.config.weight_decay = 1.0 / 3.0;
  s.config.model.dropout = std::nextafter(1.0, 0.0);
  s.config.seed = ~uint64_t{0};
  s.config.data = "/data/corpus.txt";
  s.data = {1000, 900, 0x0123456789abcdefull};
  s.step = 20;
  s.data_gen = {~uint64_t{0}, 1, s.config.seed * 2 + 1, -1.2345678901234567e-300, true};
  s.dropout_gens["blocks.1.attn.drop"] = {7, 8, 9, 0.5, false};
  const tools::RunState r = tools::decode_run_state(tools::encode_run_state(s), "x");
  EXPECT_EQ(tools::encode_run_state(r), tools::encode_run_state(s));
  EXPECT_EQ(r.config.lr, s.config.lr);
  EXPECT_EQ(r.config.min_lr, s.config.min_lr);
  EXPECT_EQ(r.config.weight_decay, s.config.weight_decay);
  EXPECT_EQ(r.config.model.dropout, s.config.model.dropout);
  EXPECT_EQ(r.config.seed, s.config.seed);
  EXPECT_EQ(r.data, s.data);
  EXPECT_EQ(r.data_gen.s0, s.data_gen.s0);
  EXPECT_EQ(r.data_gen.cached_normal, s.data_gen.cached_normal);
  EXPECT_TRUE(r.data_gen.has_cached);
  ASSERT_EQ(r.dropout_gens.size(), 1u);
  EXPECT_EQ(r.dropout_gens.at("blocks.1.attn.drop").s1, 8u);
  EXPECT_EQ(r.config.data, "/data/corpus.txt");
  EXPECT_FALSE(r.config.master_weights);
  s.config.precision = "bf16";
  s.config.master_weights = true;
  const tools::RunState m = tools::decode_run_state(tools::encode_run_state(s), "x");
  EXPECT_TRUE(m.config.master_weights);
  EXPECT_EQ(m.config.precision, "bf16");
}

// adjoint-train's --resume: flags left out take the checkpoint's values, given ones must agree
// unless they only change how the run executes.
TEST(RunState, AdoptTakesTheCheckpointsSettings) {
  tools::TrainConfig stored = decaying();
  stored.lr = 1e-2;
  stored.checkpoint = "block";
  stored.data = "/data/corpus.txt";
  stored.save_every = 5;
  auto none = [](std::string_view) { return false; };
  tools::TrainConfig c;  // the flags' defaults
  tools::adopt_run_config(c, stored, none, "ckpt");
  tools::RunState mine, theirs;
  mine.config = c;
  theirs.config = stored;
  EXPECT_EQ(tools::encode_run_state(mine), tools::encode_run_state(theirs));

  tools::TrainConfig given = tools::TrainConfig();
  given.lr = 1e-2;  // agrees
  given.checkpoint = "none";
  given.save_every = 10;
  given.data = "/moved/corpus.txt";
  auto these = [](std::string_view f) {
    return f == "--lr" || f == "--checkpoint" || f == "--save-every" || f == "--data";
  };
  tools::adopt_run_config(given, stored, these, "ckpt");
  EXPECT_EQ(given.steps, 20);
  EXPECT_EQ(given.checkpoint, "none");
  EXPECT_EQ(given.save_every, 10);
  EXPECT_EQ(given.data, "/moved/corpus.txt");

  tools::TrainConfig wrong;
  wrong.steps = 1000;
  expect_error(
      [&] {
        tools::adopt_run_config(
            wrong, stored, [](std::string_view f) { return f == "--steps"; }, "ckpt");
      },
      ErrorKind::Value,
      {"[train] 'ckpt': --steps is 20 in the checkpoint but 1000 was given", "leave --steps out"});
}

}  // namespace
