// save_checkpoint / load_checkpoint: parameters and optimizer state through one safetensors
// file, a resumed run that continues bit-identically, in-place restores, failed loads that
// leave parameters and optimizer untouched, and the clean-up of stale temporaries.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include "adjoint/adjoint.h"
#include "adjoint/io.h"
#include "adjoint/optim.h"
#include "io/io_test_util.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::io_test;
using adjoint::testing::expect_error;

namespace {

struct Model {
  Tensor w, b;
  explicit Model(uint64_t seed) {
    Generator gen(seed);
    w = randn({3, 2}, DType::Float32, &gen).requires_grad_(true);
    b = zeros({2}, DType::Float32).requires_grad_(true);
  }
  io::NamedTensors named() const { return {{"layer.weight", w}, {"layer.bias", b}}; }
  std::vector<Tensor> params() const { return {w, b}; }
};

// One training step on a fixed batch; the batch depends on the step so runs can be compared.
void train_step(Model& m, optim::Optimizer& opt, int step) {
  Generator gen(100 + step);
  Tensor x = randn({8, 3}, DType::Float32, &gen);
  Tensor y = randn({8, 2}, DType::Float32, &gen);
  opt.zero_grad();
  mse_loss(matmul(x, m.w) + m.b, y).backward();
  optim::clip_grad_norm_(opt.params(), 1.0);
  opt.step();
}

void expect_identical(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
}

}  // namespace

TEST(Checkpoint, ResumedRunContinuesBitIdentically) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  Model a(1);
  optim::AdamW opt_a(a.params(), {.lr = 0.01, .weight_decay = 0.1});
  optim::Scheduler sched_a(opt_a, optim::cosine_schedule(0.01, 20, 3, 0.001));
  for (int s = 0; s < 5; ++s) {
    train_step(a, opt_a, s);
    sched_a.step();
  }
  io::save_checkpoint(path, a.named(), &opt_a, {{"run", "test"}});

  Model b(2);  // different initial values: everything must come from the file
  optim::AdamW opt_b(b.params(), {.lr = 0.5});
  const Tensor w_handle = b.w;
  const void* w_data = b.w.raw_data();
  io::Metadata meta = io::load_checkpoint(path, b.named(), &opt_b);
  EXPECT_EQ(meta.at("run"), "test");
  EXPECT_TRUE(w_handle.is_same(b.w));
  EXPECT_EQ(b.w.raw_data(), w_data);  // restored in place
  EXPECT_TRUE(b.w.requires_grad());
  EXPECT_EQ(opt_b.step_count(), 5);
  optim::Scheduler sched_b(opt_b, optim::cosine_schedule(0.01, 20, 3, 0.001));
  for (int s = 5; s < 10; ++s) {
    train_step(a, opt_a, s);
    sched_a.step();
    train_step(b, opt_b, s);
    sched_b.step();
  }
  expect_identical(b.w, a.w);
  expect_identical(b.b, a.b);
}

TEST(Checkpoint, FileLayout) {
  TempDir dir;
  Model m(3);
  optim::SGD opt(m.params(), {.lr = 0.1, .momentum = 0.9});
  train_step(m, opt, 0);
  io::save_checkpoint(dir.file("c"), m.named(), &opt);
  io::SafetensorsFile f = io::load_safetensors(dir.file("c"));
  std::vector<std::string> names;
  for (const auto& [n, t] : f.tensors) names.push_back(n);
  const std::vector<std::string> want = {"layer.weight",
                                         "layer.bias",
                                         "optim.step",
                                         "optim.hparams.lr",
                                         "optim.hparams.momentum",
                                         "optim.hparams.dampening",
                                         "optim.hparams.weight_decay",
                                         "optim.hparams.nesterov",
                                         "optim.state.0.momentum_buffer",
                                         "optim.state.1.momentum_buffer"};
  EXPECT_EQ(names, want);
}

TEST(Checkpoint, ParametersOnly) {
  TempDir dir;
  Model a(4), b(5);
  io::save_checkpoint(dir.file("p"), a.named());
  io::load_checkpoint(dir.file("p"), b.named());
  expect_identical(b.w, a.w);
  optim::SGD opt(b.params(), {});
  expect_error([&] { io::load_checkpoint(dir.file("p"), b.named(), &opt); }, ErrorKind::Value,
               {"[io.load_checkpoint]", "no optimizer state"});
}

TEST(Checkpoint, FailedLoadsChangeNothing) {
  TempDir dir;
  Model a(6);
  optim::Adam opt_a(a.params(), {.lr = 0.01});
  train_step(a, opt_a, 0);
  io::save_checkpoint(dir.file("c"), a.named(), &opt_a);

  Model b(7);
  optim::Adam opt_b(b.params(), {.lr = 0.5});
  const std::vector<float> w_before = b.w.to_vector<float>();
  auto unchanged = [&] {
    EXPECT_EQ(b.w.to_vector<float>(), w_before);
    EXPECT_EQ(opt_b.lr(), 0.5);
    EXPECT_EQ(opt_b.step_count(), 0);
  };
  // A parameter missing from the file.
  io::NamedTensors extra = b.named();
  extra.emplace_back("head.weight", zeros({2}).requires_grad_(true));
  expect_error([&] { io::load_checkpoint(dir.file("c"), extra, &opt_b); }, ErrorKind::Value,
               {"[io.load_checkpoint]", "'head.weight'", "not in the checkpoint"});
  unchanged();
  // A shape mismatch.
  Tensor wrong = zeros({2, 3}).requires_grad_(true);
  expect_error(
      [&] {
        io::load_checkpoint(dir.file("c"), {{"layer.weight", wrong}, {"layer.bias", b.b}});
      },
      ErrorKind::Shape, {"[io.load_checkpoint]", "'layer.weight'", "[3, 2]", "[2, 3]"});
  // A parameter the caller did not list (strict), then allowed.
  expect_error(
      [&] {
        io::load_checkpoint(dir.file("c"), {{"layer.weight", b.w}}, &opt_b);
      },
      ErrorKind::Value, {"[io.load_checkpoint]", "'layer.bias'", "strict"});
  unchanged();
  // The optimizer state does not fit this optimizer: parameters stay as they were too.
  optim::SGD sgd(b.params(), {.lr = 0.5});
  expect_error([&] { io::load_checkpoint(dir.file("c"), b.named(), &sgd); }, ErrorKind::Value,
               {"[optim.SGD]", "load_state_dict"});
  unchanged();
  // A corrupt file.
  write_bytes(dir.file("bad"), "garbage!garbage!");
  expect_error([&] { io::load_checkpoint(dir.file("bad"), b.named(), &opt_b); }, ErrorKind::IO,
               {"[io.load_safetensors]", "bad"});
  unchanged();

  io::load_checkpoint(dir.file("c"), {{"layer.weight", b.w}}, nullptr, /*strict=*/false);
  expect_identical(b.w, a.w);
}

TEST(Checkpoint, NamesMayNotClashWithTheOptimizer) {
  TempDir dir;
  Model m(8);
  optim::SGD opt(m.params(), {});
  expect_error(
      [&] {
        io::save_checkpoint(dir.file("c"), {{"optim.w", m.w}}, &opt);
      },
      ErrorKind::Value, {"[io.save_checkpoint]", "'optim.w'", "clash"});
  EXPECT_TRUE(dir.entries().empty());
}

// A pid that no process has: a child that has exited and been reaped.
static pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

// A process killed while saving leaves `<target>.tmp.<pid>.<n>`; the next save of the same
// target removes it, and nothing else: not a live process's temporary (another process's or
// this one's: a save in progress), not another target's, not look-alikes.
TEST(Checkpoint, SaveRemovesStaleTemporariesOfItsTargetOnly) {
  TempDir dir;
  Model m(9);
  const std::string dead = std::to_string(dead_pid());
  const std::string self = std::to_string(::getpid());
  const std::string parent = std::to_string(::getppid());
  const std::vector<std::string> stale = {"c.tmp." + dead + ".0", "c.tmp." + dead + ".17"};
  const std::vector<std::string> kept = {
      "c.tmp." + self + ".3",      // this process: maybe a save in progress
      "c.tmp." + parent + ".0",    // a live process
      "c.tmp.1.0",                 // init: alive
      "other.tmp." + dead + ".0",  // another target's
      "cc.tmp." + dead + ".0",     // another target's whose name ends like it
      "c.tmp." + dead,             // not the pattern
      "c.tmp." + dead + ".0.x",    // not the pattern
      "c.tmp.0.0",                 // pid 0 would address a process group: never stale
      "c.tmp.x" + dead + ".0",     // not a number
      "c.tmp." + dead + ".",       // no counter
  };
  for (const auto& name : stale) write_bytes(dir.file(name), "partial");
  for (const auto& name : kept) write_bytes(dir.file(name), "partial");
  io::save_checkpoint(dir.file("c"), m.named());
  std::vector<std::string> want = kept;
  want.push_back("c");
  std::vector<std::string> got = dir.entries();
  std::sort(want.begin(), want.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, want);
  // The function itself, and a directory given implicitly (a bare file name).
  write_bytes(dir.file("c.tmp." + dead + ".5"), "partial");
  EXPECT_EQ(io::remove_stale_temporaries(dir.file("c")), 1u);
  EXPECT_EQ(io::remove_stale_temporaries(dir.file("c")), 0u);
  EXPECT_EQ(io::remove_stale_temporaries("no_such_dir_adjoint/c"), 0u);
}

// A save that fails while writing (here: past the file size limit) removes its temporary and
// leaves the previous checkpoint as it was.
TEST(Checkpoint, FailedWriteLeavesNoTemporary) {
  TempDir dir;
  Model m(10);
  io::save_checkpoint(dir.file("c"), m.named());
  const std::string before = read_bytes(dir.file("c"));
  io::NamedTensors big = m.named();
  big.emplace_back("big", zeros({1 << 20}));  // 4 MiB
  struct rlimit old_limit;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG
  struct rlimit limit = old_limit;
  limit.rlim_cur = 1 << 16;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limit), 0);
  expect_error([&] { io::save_checkpoint(dir.file("c"), big); }, ErrorKind::IO,
               {"[io.save_safetensors]", "cannot write the temporary file"});
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"c"});
  EXPECT_EQ(read_bytes(dir.file("c")), before);
}

// load_checkpoint from a file already read restores the same values, and a path only names
// the file in messages.
TEST(Checkpoint, LoadFromAFileAlreadyRead) {
  TempDir dir;
  Model a(11), b(12);
  optim::AdamW opt_a(a.params(), {.lr = 0.01}), opt_b(b.params(), {.lr = 0.5});
  train_step(a, opt_a, 0);
  io::save_checkpoint(dir.file("c"), a.named(), &opt_a);
  const io::SafetensorsFile file = io::load_safetensors(dir.file("c"));
  io::load_checkpoint(file, "shown.safetensors", b.named(), &opt_b);
  expect_identical(b.w, a.w);
  EXPECT_EQ(opt_b.step_count(), 1);
  Model c(13);
  io::NamedTensors extra = c.named();
  extra.emplace_back("head.weight", zeros({2}).requires_grad_(true));
  expect_error([&] { io::load_checkpoint(file, "shown.safetensors", extra); }, ErrorKind::Value,
               {"'shown.safetensors'", "'head.weight'"});
}
