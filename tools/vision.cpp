// adjoint-vision: the vision demo (docs/vision.md, "The demo"). Trains a small ResNet on
// Fashion-MNIST with a progress bar, evaluates on the test set after each epoch, and writes the
// loss and accuracy curves, the confusion matrix, per-layer gradient health and a checkpoint
// that --resume continues bit for bit (with the same thread count).
//   adjoint-vision [--data DIR] [--out DIR] [--epochs 3] [--batch 128] [--lr 0.1]
//                  [--precision fp32|bf16] [--threads 0] [--resume CKPT] [--stop-after N]
//                  [--train-limit N] [--test-limit N] [--grad-every 20] ...
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "adjoint/data/idx.h"
#include "gradient_health.h"
#include "loss_log.h"
#include "svg_plot.h"
#include "train_flags.h"
#include "vision_trainer.h"

namespace {

using namespace adjoint;
using Clock = std::chrono::steady_clock;

std::string slashed(const std::vector<int64_t>& v) {  // 16/32/64
  std::string s;
  for (int64_t x : v) s += (s.empty() ? "" : "/") + std::to_string(x);
  return s;
}

// One line, redrawn in place on stderr:
// [=====>      ] epoch 1/3 step 120/1407  loss 0.345 | 950 img/s | ETA 1m40s
void progress(const tools::VisionTrainer& t, double loss, double images_per_s, double eta) {
  constexpr int kBar = 24;
  const double done = static_cast<double>(t.step()) / static_cast<double>(t.total_steps());
  const int filled = static_cast<int>(kBar * std::clamp(done, 0.0, 1.0));
  std::string bar(filled, '=');
  if (filled < kBar) bar += '>' + std::string(kBar - filled - 1, ' ');
  const int64_t epoch = std::min(t.config().epochs, t.step() / t.steps_per_epoch() + 1);
  std::fprintf(stderr, "\r[%s] epoch %lld/%lld step %lld/%lld  loss %.3f | %.0f img/s | ETA %s   ",
               bar.c_str(), static_cast<long long>(epoch),
               static_cast<long long>(t.config().epochs), static_cast<long long>(t.step()),
               static_cast<long long>(t.total_steps()), loss, images_per_s,
               tools::format_duration(eta).c_str());
  std::fflush(stderr);
}

tools::Series series(const char* name, const char* color, bool markers = false) {
  tools::Series s;
  s.name = name;
  s.color = color;
  s.markers = markers;
  return s;
}

// loss.svg: the training loss of every step (and its running mean over 50 steps), the test
// loss at the end of each epoch.
void write_loss_svg(const std::vector<tools::LossRow>& rows, const std::string& path) {
  tools::Series raw = series("training loss (per step)", "#aec7e8");
  tools::Series smooth = series("training loss (mean of 50 steps)", "#1f77b4");
  tools::Series test = series("test loss", "#d62728", true);
  double window = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double s = static_cast<double>(rows[i].step);
    raw.x.push_back(s);
    raw.y.push_back(rows[i].train_loss);
    window += rows[i].train_loss;
    if (i >= 50) window -= rows[i - 50].train_loss;
    smooth.x.push_back(s);
    smooth.y.push_back(window / static_cast<double>(std::min<std::size_t>(i + 1, 50)));
    if (rows[i].val_loss) {
      test.x.push_back(s);
      test.y.push_back(*rows[i].val_loss);
    }
  }
  tools::write_svg_plot(path, "adjoint-vision: loss", "step", "cross-entropy", {raw, smooth, test});
}

// accuracy.svg: training accuracy over each epoch's batches and test accuracy, per epoch.
void write_accuracy_svg(const std::vector<tools::EpochRecord>& h, const std::string& path) {
  tools::Series train = series("training accuracy (over the epoch)", "#1f77b4", true);
  tools::Series test = series("test accuracy", "#d62728", true);
  for (std::size_t e = 0; e < h.size(); ++e) {
    train.x.push_back(static_cast<double>(e + 1));
    train.y.push_back(h[e].train_accuracy);
    test.x.push_back(static_cast<double>(e + 1));
    test.y.push_back(h[e].test_accuracy);
  }
  tools::write_svg_plot(path, "adjoint-vision: accuracy", "epoch", "accuracy", {train, test});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"adjoint-vision: a small ResNet on Fashion-MNIST"};
  tools::VisionConfig c;
  std::string data_dir = data::kFashionMnistDir, out = "vision-out", resume;
  int64_t stop_after = 0;
  int threads = 0;
  tools::GradientHealthOptions health_options;
  health_options.every = 20;
  app.add_option("--data", data_dir, "folder of the four Fashion-MNIST IDX files (.gz or plain)")
      ->capture_default_str();
  app.add_option("--out", out, "output folder")->capture_default_str();
  app.add_option("--epochs", c.epochs, "passes over the training set")->capture_default_str();
  app.add_option("--batch", c.batch, "images per step")->capture_default_str();
  app.add_option("--lr", c.lr, "peak learning rate")->capture_default_str();
  app.add_option("--momentum", c.momentum, "Nesterov momentum")->capture_default_str();
  app.add_option("--weight-decay", c.weight_decay, "L2 penalty")->capture_default_str();
  app.add_option("--warmup", c.warmup, "linear warmup steps")->capture_default_str();
  app.add_option("--channels", c.channels, "channels of the stem and each stage")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--blocks", c.blocks,
                 "basic blocks of each stage (one number per stage, or one for all)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--seed", c.seed, "seed of the weights and the data order")->capture_default_str();
  app.add_option("--precision", c.precision, "fp32, or bf16 (autocast)")->capture_default_str();
  app.add_option("--train-limit", c.train_limit, "train on the first N images (0: all)")
      ->capture_default_str();
  app.add_option("--test-limit", c.test_limit, "test on the first N images (0: all)")
      ->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (0: all cores)")->capture_default_str();
  app.add_option("--resume", resume, "continue the run of this checkpoint");
  app.add_option("--stop-after", stop_after,
                 "stop after this many steps of the run (0: at the end), saving the checkpoint")
      ->capture_default_str();
  app.add_option("--grad-every", health_options.every,
                 "steps between gradient health records (0: none; the NaN check still runs)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    ADJOINT_CHECK(stop_after >= 0 && threads >= 0 && health_options.every >= 0, Value, "vision",
                  "--stop-after, --threads and --grad-every must not be negative");
    if (threads > 0) set_num_threads(threads);
    const Clock::time_point t_start = Clock::now();
    // Everything that can refuse the run does so before the output folder is touched.
    data::ImageDataset train = data::read_mnist(data_dir, true);
    data::ImageDataset test = data::read_mnist(data_dir, false);
    tools::VisionTrainer trainer(c, std::move(train), std::move(test));
    if (!resume.empty()) {
      trainer.resume(resume);
      if (trainer.resumed_threads() != get_num_threads())
        std::fprintf(stderr,
                     "note: %s was written with %lld threads, this run has %d; the result is "
                     "the same to rounding, not bit for bit\n",
                     resume.c_str(), static_cast<long long>(trainer.resumed_threads()),
                     get_num_threads());
    }
    std::filesystem::create_directories(out);
    const std::string ckpt = out + "/checkpoint.safetensors";
    std::printf("data: %s, %lld training and %lld test images\n", data_dir.c_str(),
                static_cast<long long>(trainer.train_images()),
                static_cast<long long>(trainer.test_images()));
    std::printf(
        "model: ResNet, channels %s, blocks %s, %lld parameters; %lld "
        "epochs of %lld steps, batch %lld, %s, %d threads%s\n",
        slashed(c.channels).c_str(), slashed(tools::blocks_per_stage(c)).c_str(),
        static_cast<long long>(trainer.num_parameters()), static_cast<long long>(c.epochs),
        static_cast<long long>(trainer.steps_per_epoch()), static_cast<long long>(c.batch),
        c.precision.c_str(), get_num_threads(),
        resume.empty() ? "" : (", resumed at step " + std::to_string(trainer.step())).c_str());
    std::fflush(stdout);

    tools::LossLog log = resume.empty() ? tools::LossLog::create(out + "/loss.csv")
                                        : tools::LossLog::resume(out + "/loss.csv", trainer.step());
    if (!log.note().empty()) std::printf("%s\n", log.note().c_str());
    std::vector<tools::LossRow> rows = log.kept();
    tools::GradientHealth health(trainer.model().named_parameters(), health_options);
    const int64_t end =
        stop_after > 0 ? std::min(stop_after, trainer.total_steps()) : trainer.total_steps();
    const int64_t first_step = trainer.step();
    std::optional<tools::Evaluation> last_eval;
    const Clock::time_point t0 = Clock::now();
    while (trainer.step() < end) {
      const double loss = trainer.train_step(&health);
      for (const std::string& w : health.take_warnings()) std::fprintf(stderr, "\n%s\n", w.c_str());
      std::optional<double> test_loss;
      if (trainer.epoch_done()) {
        last_eval = trainer.evaluate();
        const tools::EpochRecord& r = trainer.end_epoch(*last_eval);
        test_loss = r.test_loss;
        std::fprintf(stderr, "\n");
        std::printf(
            "epoch %zu: training loss %.4f, accuracy %.4f; test loss %.4f, accuracy "
            "%.4f (%.0f s)\n",
            trainer.history().size(), r.train_loss, r.train_accuracy, r.test_loss, r.test_accuracy,
            std::chrono::duration<double>(Clock::now() - t0).count());
        std::fflush(stdout);
      }
      log.append(trainer.step(), loss, test_loss);
      rows.push_back({trainer.step(), loss, test_loss});
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      const double per_step = s / static_cast<double>(trainer.step() - first_step);
      progress(trainer, loss, static_cast<double>(c.batch) / per_step,
               per_step * static_cast<double>(end - trainer.step()));
    }
    std::fprintf(stderr, "\n");
    trainer.save(ckpt);
    if (!last_eval || !trainer.epoch_done()) last_eval = trainer.evaluate();

    const std::string loss_svg = out + "/loss.svg", acc_svg = out + "/accuracy.svg",
                      confusion_svg = out + "/confusion.svg", grads_svg = out + "/grads.svg";
    write_loss_svg(rows, loss_svg);
    write_accuracy_svg(trainer.history(), acc_svg);
    tools::write_confusion_svg(*last_eval, confusion_svg,
                               "adjoint-vision, step " + std::to_string(trainer.step()));
    if (!health.records().empty()) {
      tools::write_gradient_csv(health, out + "/grads.csv");
      tools::write_gradient_svg(health, grads_svg, "adjoint-vision");
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
    if (trainer.step() < trainer.total_steps())
      std::printf("stopped at step %lld of %lld; continue with --resume %s\n",
                  static_cast<long long>(trainer.step()),
                  static_cast<long long>(trainer.total_steps()), ckpt.c_str());
    std::printf(
        "trained %lld steps in %s (%s in all)\n",
        static_cast<long long>(trainer.step() - first_step),
        tools::format_duration(std::chrono::duration<double>(Clock::now() - t0).count()).c_str(),
        tools::format_duration(seconds).c_str());
    std::printf("test accuracy %.4f (%lld images, loss %.4f)\n", last_eval->accuracy,
                static_cast<long long>(last_eval->images), last_eval->loss);
    std::printf("wrote %s, %s, %s%s, %s/loss.csv and %s\n", loss_svg.c_str(), acc_svg.c_str(),
                confusion_svg.c_str(), health.records().empty() ? "" : (", " + grads_svg).c_str(),
                out.c_str(), ckpt.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nerror: %s\n", e.what());
    return 1;
  }
  return 0;
}
