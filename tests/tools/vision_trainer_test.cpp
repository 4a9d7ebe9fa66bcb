// The trainer behind adjoint-vision on a small synthetic image set (each class a bright square at
// its own place, plus noise). The oracles: the loss falls; a run stopped mid-epoch and resumed
// equals the uninterrupted run bit for bit (weights, batch-norm buffers, momentum, history); the
// confusion matrix against a plain loop over the test images; the learning rate against its
// closed form; bad settings, checkpoints and IDX files are named errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numbers>

#include "adjoint/io.h"
#include "io/io_test_util.h"
#include "support/expect.h"
#include "vision_trainer.h"

namespace {

using namespace adjoint;
using adjoint::io_test::TempDir;
using adjoint::testing::expect_error;

// n images of 12 x 12: class k has a 4 x 4 square of 0.9 at one of 9 places (class 9 has two),
// on uniform noise in [0, 0.3).
data::ImageDataset squares(int64_t n, uint64_t seed) {
  Generator g(seed);
  Tensor images = rand({n, 1, 12, 12}, {}, &g) * 0.3;
  std::vector<int64_t> labels(static_cast<std::size_t>(n));
  float* px = images.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = static_cast<int64_t>(g.next_u64() % tools::kClasses);
    labels[static_cast<std::size_t>(i)] = k;
    auto square = [&](int64_t place) {
      const int64_t r0 = (place / 3) * 4, c0 = (place % 3) * 4;
      for (int64_t r = r0; r < r0 + 4; ++r)
        for (int64_t c = c0; c < c0 + 4; ++c) px[i * 144 + r * 12 + c] = 0.9f;
    };
    if (k < 9) {
      square(k);
    } else {
      square(0);
      square(8);
    }
  }
  return {images, tensor(labels)};
}

tools::VisionConfig small() {
  tools::VisionConfig c;
  c.channels = {8, 16};
  c.blocks = {1, 2};  // the default's shape: the last stage has two blocks
  c.epochs = 2;
  c.batch = 16;
  c.warmup = 3;
  c.lr = 0.1;
  return c;
}

// Every tensor of the model's state and the optimizer's, as bytes.
std::vector<std::vector<char>> state_bytes(tools::VisionTrainer& t) {
  std::vector<std::vector<char>> out;
  for (const auto& [name, x] : t.model().state_dict()) {
    const Tensor c = x.contiguous();
    const char* p = static_cast<const char*>(c.raw_data());
    out.emplace_back(p, p + c.nbytes());
  }
  return out;
}

// The mean loss of the first and of the last 5 steps.
std::pair<double, double> first_and_last(const std::vector<double>& l) {
  double a = 0, b = 0;
  for (std::size_t i = 0; i < 5; ++i) {
    a += l[i] / 5;
    b += l[l.size() - 1 - i] / 5;
  }
  return {a, b};
}

TEST(VisionTrainer, LossFalls) {
  tools::VisionTrainer t(small(), squares(320, 1), squares(64, 2));  // 20 steps per epoch
  ASSERT_EQ(t.steps_per_epoch(), 20);
  std::vector<double> losses;
  while (t.step() < t.total_steps()) losses.push_back(t.train_step());
  ASSERT_EQ(losses.size(), 40u);
  const auto [first, last] = first_and_last(losses);
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
  for (double l : losses) EXPECT_TRUE(std::isfinite(l));
}

TEST(VisionTrainer, ResumeEqualsUninterruptedRun) {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt.safetensors");
  const data::ImageDataset train = squares(320, 1), test = squares(64, 2);
  auto run = [](tools::VisionTrainer& t, int64_t until) {
    std::vector<double> losses;
    while (t.step() < until) {
      losses.push_back(t.train_step());
      if (t.epoch_done()) t.end_epoch(t.evaluate());
    }
    return losses;
  };
  tools::VisionTrainer whole(small(), train, test);
  const std::vector<double> all = run(whole, whole.total_steps());

  tools::VisionTrainer first(small(), train, test);
  std::vector<double> losses = run(first, 27);  // stopped inside the second epoch
  first.save(ckpt);
  tools::VisionTrainer second(small(), train, test);
  second.resume(ckpt);
  EXPECT_EQ(second.step(), 27);
  for (double l : run(second, second.total_steps())) losses.push_back(l);

  ASSERT_EQ(losses.size(), all.size());
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_EQ(losses[i], all[i]) << "step " << i + 1;
  EXPECT_EQ(state_bytes(second), state_bytes(whole));
  ASSERT_EQ(second.history().size(), 2u);
  for (std::size_t e = 0; e < 2; ++e) {
    EXPECT_EQ(second.history()[e].train_loss, whole.history()[e].train_loss);
    EXPECT_EQ(second.history()[e].train_accuracy, whole.history()[e].train_accuracy);
    EXPECT_EQ(second.history()[e].test_accuracy, whole.history()[e].test_accuracy);
  }
  // The momentum buffers too: one more save of each, compared tensor by tensor.
  whole.save(dir.file("a.safetensors"));
  second.save(dir.file("b.safetensors"));
  const io::SafetensorsFile a = io::load_safetensors(dir.file("a.safetensors"));
  const io::SafetensorsFile b = io::load_safetensors(dir.file("b.safetensors"));
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, b.tensors[i].first);
    EXPECT_EQ(a.tensors[i].second.to_vector<double>(), b.tensors[i].second.to_vector<double>())
        << a.tensors[i].first;
  }
}

TEST(VisionTrainer, ResumeRefusesAnotherRunAndChangesNothing) {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt.safetensors");
  tools::VisionTrainer t(small(), squares(160, 1), squares(64, 2));
  t.train_step();
  t.save(ckpt);
  tools::VisionConfig other = small();
  other.lr = 0.05;
  tools::VisionTrainer u(other, squares(160, 1), squares(64, 2));
  const auto before = state_bytes(u);
  expect_error([&] { u.resume(ckpt); }, ErrorKind::Value,
               {"--lr 0.10000000000000001", "--lr 0.05"});
  EXPECT_EQ(u.step(), 0);
  EXPECT_EQ(state_bytes(u), before);
  expect_error([&] { u.resume(dir.file("missing.safetensors")); }, ErrorKind::IO,
               {"missing.safetensors"});
}

// A checkpoint written before --blocks took a list holds one number for every stage ("1");
// it resumes under the same model and is refused, naming --blocks, under another.
TEST(VisionTrainer, ResumesACheckpointWithOneBlockCount) {
  TempDir dir;
  const std::string ckpt = dir.file("ckpt.safetensors"), old = dir.file("old.safetensors");
  tools::VisionConfig c = small();
  c.blocks = {1};
  tools::VisionTrainer t(c, squares(160, 1), squares(64, 2));
  t.train_step();
  t.save(ckpt);
  io::SafetensorsFile f = io::load_safetensors(ckpt);
  ASSERT_EQ(f.metadata.at("config.blocks"), "1,1");
  f.metadata["config.blocks"] = "1";
  io::save_safetensors(old, f.tensors, f.metadata);
  tools::VisionTrainer u(c, squares(160, 1), squares(64, 2));
  u.resume(old);
  EXPECT_EQ(u.step(), 1);
  EXPECT_EQ(state_bytes(u), state_bytes(t));
  tools::VisionTrainer v(small(), squares(160, 1), squares(64, 2));  // blocks 1,2
  expect_error([&] { v.resume(old); }, ErrorKind::Value, {"--blocks 1,1", "--blocks 1,2"});
}

TEST(VisionTrainer, ConfusionMatrixAgreesWithALoop) {
  tools::VisionTrainer t(small(), squares(160, 1), squares(70, 2));
  for (int i = 0; i < 12; ++i) t.train_step();
  const tools::Evaluation e = t.evaluate();
  // The oracle: each test image alone through the model in evaluation mode.
  const data::ImageDataset test = squares(70, 2);
  std::vector<std::vector<int64_t>> expected(10, std::vector<int64_t>(10, 0));
  int64_t correct = 0;
  {
    NoGradGuard no_grad;
    t.model().eval();
    for (int64_t i = 0; i < 70; ++i) {
      const std::vector<float> logits =
          t.model()(test.images.slice(0, i, i + 1)).to_vector<float>();
      const int64_t predicted = std::max_element(logits.begin(), logits.end()) - logits.begin();
      const int64_t truth = test.labels.to_vector<int64_t>()[static_cast<std::size_t>(i)];
      ++expected[truth][predicted];
      correct += predicted == truth;
    }
    t.model().train();
  }
  EXPECT_EQ(e.confusion, expected);
  int64_t sum = 0, trace = 0;
  for (int r = 0; r < 10; ++r)
    for (int c = 0; c < 10; ++c) {
      sum += e.confusion[r][c];
      if (r == c) trace += e.confusion[r][c];
    }
  EXPECT_EQ(sum, 70);
  EXPECT_EQ(e.images, 70);
  EXPECT_EQ(trace, correct);
  EXPECT_DOUBLE_EQ(e.accuracy, static_cast<double>(trace) / 70);
  EXPECT_TRUE(std::isfinite(e.loss));
  TempDir dir;
  tools::write_confusion_svg(e, dir.file("c.svg"), "test");
  std::ifstream in(dir.file("c.svg"));
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(svg.find("Ankle boot"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

TEST(VisionTrainer, LearningRateSchedule) {
  tools::VisionConfig c = small();
  c.lr = 0.2;
  c.warmup = 10;
  const int64_t total = 110;
  EXPECT_DOUBLE_EQ(tools::vision_learning_rate(c, 0, total), 0.02);
  EXPECT_DOUBLE_EQ(tools::vision_learning_rate(c, 9, total), 0.2);
  EXPECT_DOUBLE_EQ(tools::vision_learning_rate(c, 10, total), 0.2);
  EXPECT_NEAR(tools::vision_learning_rate(c, 60, total), 0.1, 1e-15);
  EXPECT_NEAR(tools::vision_learning_rate(c, 35, total), 0.1 * (1 + std::cos(std::numbers::pi / 4)),
              1e-15);
  EXPECT_NEAR(tools::vision_learning_rate(c, 110, total), 0, 1e-15);
}

TEST(VisionTrainer, Bfloat16StepsLearn) {
  tools::VisionConfig c = small();
  c.precision = "bf16";
  tools::VisionTrainer t(c, squares(160, 1), squares(64, 2));
  std::vector<double> losses;
  while (t.step() < t.total_steps()) losses.push_back(t.train_step());
  EXPECT_LT((losses[17] + losses[18] + losses[19]) / 3,
            0.8 * (losses[0] + losses[1] + losses[2]) / 3);
  // The weights stay float32 (autocast casts only the convolutions' and the head's inputs).
  for (const Tensor& p : t.model().parameters()) EXPECT_EQ(p.dtype(), DType::Float32);
}

TEST(VisionTrainer, BadSettingsAreNamed) {
  tools::VisionConfig c = small();
  c.batch = 500;
  expect_error([&] { tools::VisionTrainer(c, squares(160, 1), squares(64, 2)); }, ErrorKind::Value,
               {"vision", "160 images", "batch of 500"});
  c = small();
  c.precision = "fp8";
  expect_error([&] { tools::VisionTrainer(c, squares(160, 1), squares(64, 2)); }, ErrorKind::Value,
               {"--precision", "fp8"});
  c = small();
  c.blocks = {1, 1, 2};  // three counts for two stages
  expect_error([&] { tools::VisionTrainer(c, squares(160, 1), squares(64, 2)); }, ErrorKind::Value,
               {"--blocks", "8,16", "1,1,2"});
  c.blocks = {1, 0};
  expect_error([&] { tools::VisionTrainer(c, squares(160, 1), squares(64, 2)); }, ErrorKind::Value,
               {"--blocks must be positive", "1,0"});
}

// The default model, counted by hand: a 3x3 convolution from i to o channels has 9 i o
// weights, a 1x1 one i o, a batch norm 2 o, the head 64 * 10 + 10.
TEST(VisionTrainer, DefaultModelHasOneBlockThenOneThenTwo) {
  const tools::VisionConfig c;
  EXPECT_EQ(tools::blocks_per_stage(c), (std::vector<int64_t>{1, 1, 2}));
  auto conv3 = [](int64_t i, int64_t o) { return 9 * i * o; };
  auto bn = [](int64_t o) { return 2 * o; };
  auto block = [&](int64_t i, int64_t o) {
    return conv3(i, o) + bn(o) + conv3(o, o) + bn(o) + (i != o ? i * o + bn(o) : 0);
  };
  const int64_t expected = conv3(1, 16) + bn(16) + block(16, 16) + block(16, 32) + block(32, 64) +
                           block(64, 64) + 64 * 10 + 10;
  EXPECT_EQ(expected, 151738);
  // The model is built for any image size; 12 x 12 squares keep the test small.
  tools::VisionTrainer t(c, squares(160, 1), squares(64, 2));
  EXPECT_EQ(t.num_parameters(), expected);
  // One number means every stage.
  tools::VisionConfig two = c;
  two.blocks = {2};
  EXPECT_EQ(tools::blocks_per_stage(two), (std::vector<int64_t>{2, 2, 2}));
}

TEST(VisionTrainer, IdxErrorsNameTheFile) {
  TempDir dir;
  expect_error([&] { data::read_mnist(dir.path().string(), true); }, ErrorKind::IO,
               {"train-images-idx3-ubyte.gz"});
  // A truncated images file: the header promises 10 images of 28 x 28, the file holds 100 bytes.
  std::ofstream out(dir.file("t10k-images-idx3-ubyte.gz"), std::ios::binary);
  const unsigned char header[16] = {0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 28, 0, 0, 0, 28};
  out.write(reinterpret_cast<const char*>(header), 16);
  out.write(std::string(100, '\1').data(), 100);
  out.close();
  expect_error([&] { data::read_mnist(dir.path().string(), false); }, ErrorKind::IO,
               {"t10k-images-idx3-ubyte.gz", "truncated"});
}

}  // namespace
