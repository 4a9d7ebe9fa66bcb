// The training loop behind adjoint-vision (docs/vision.md, "The demo"), as a library so that
// tests can run it: a small ResNet (basic blocks, batch norm) for 28 x 28 grey images, trained
// with SGD + Nesterov momentum under a warmup + cosine learning rate, evaluated to an accuracy
// and a confusion matrix, and checkpoints that resume bit for bit. The data order is a function
// of (seed, epoch) alone, so a checkpoint needs no generator state.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/data/idx.h"
#include "adjoint/nn.h"
#include "adjoint/optim.h"
#include "gradient_health.h"

namespace adjoint::tools {

/// Everything the training trajectory depends on (a checkpoint records all of it).
struct VisionConfig {
  /// Channels of the stem and of each stage; each stage after the first halves the image.
  std::vector<int64_t> channels = {16, 32, 64};
  /// Basic blocks of each stage: one number per stage, or one number for every stage. The
  /// default puts a second block in the last (7 x 7) stage, where a block costs the fewest
  /// activations per parameter (docs/vision.md, "The demo").
  std::vector<int64_t> blocks = {1, 1, 2};
  int64_t epochs = 3;
  int64_t batch = 128;
  double lr = 0.1;  ///< peak learning rate, after warmup
  double momentum = 0.9;
  double weight_decay = 5e-4;
  int64_t warmup = 100;            ///< linear warmup steps, then cosine decay to 0 at the last step
  uint64_t seed = 0;               ///< the weights and the data order
  std::string precision = "fp32";  ///< "fp32" or "bf16" (autocast: bfloat16 convolutions)
  /// Use only the first N training / test images (0: all), for tests and quick runs.
  int64_t train_limit = 0, test_limit = 0;
  bool operator==(const VisionConfig&) const = default;
};

/// relu(x + bn2(conv2(relu(bn1(conv1(x)))))), with a 1x1 convolution + batch norm on the
/// shortcut where the block changes the channels or the size (He et al. 2016, option B).
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in, int64_t out, int64_t stride, Generator* gen);
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_, down_;
  std::shared_ptr<nn::BatchNorm2d> bn1_, bn2_, down_bn_;
};

/// stem (3x3 conv + bn + relu) -> stages of basic blocks -> global average pool -> Linear(10).
class VisionNet : public nn::Module {
 public:
  VisionNet(const VisionConfig& config, Generator* gen);
  Tensor forward(const Tensor& x) override;  ///< [N, 1, H, W] -> logits [N, 10]

 private:
  std::shared_ptr<nn::Conv2d> stem_;
  std::shared_ptr<nn::BatchNorm2d> stem_bn_;
  std::shared_ptr<nn::Sequential> stages_;
  std::shared_ptr<nn::Linear> head_;
};

inline constexpr int64_t kClasses = 10;

/// The blocks of each stage of `config` (its `blocks` expanded to one number per stage).
/// Throws adjoint::Error (Value, op "vision") when the counts fit neither form.
std::vector<int64_t> blocks_per_stage(const VisionConfig& config);

/// One pass over the test set.
struct Evaluation {
  double loss = 0;      ///< mean cross-entropy
  double accuracy = 0;  ///< correct / images
  int64_t images = 0;
  /// confusion[true][predicted], counts; sums to `images`, its trace is the correct ones.
  std::vector<std::vector<int64_t>> confusion;
};

/// What the run has measured at the end of each epoch, for the curves (kept in checkpoints).
struct EpochRecord {
  int64_t step = 0;
  double train_loss = 0, train_accuracy = 0;  ///< over the epoch's batches, as they trained
  double test_loss = 0, test_accuracy = 0;
};

/// The learning rate of step `step` (0-based) of `total`: linear warmup to lr over warmup
/// steps, then cosine decay to 0.
double vision_learning_rate(const VisionConfig& config, int64_t step, int64_t total);

class VisionTrainer {
 public:
  /// Throws adjoint::Error (Value, op "vision") for a bad setting, or a dataset too small for
  /// one batch.
  VisionTrainer(const VisionConfig& config, data::ImageDataset train, data::ImageDataset test);

  /// One SGD step on the next batch; returns its loss (before the update). With `health`,
  /// the gradients are checked and recorded between backward and the update.
  double train_step(GradientHealth* health = nullptr);
  /// The model on the test set in evaluation mode (running statistics), batches of 500.
  Evaluation evaluate();
  /// At the end of an epoch (the CLI calls it, with evaluate()'s result): appends an
  /// EpochRecord of the epoch's training sums and `test`, and starts new sums.
  const EpochRecord& end_epoch(const Evaluation& test);

  /// Model (parameters and batch-norm buffers), optimizer state, step, the running epoch
  /// sums, the history and the whole config (plus the thread count), atomically.
  void save(const std::string& path) const;
  /// Restores what save() wrote into this trainer. The checkpoint's config must equal
  /// config() (the first difference is a Value error naming it); everything is checked
  /// before anything changes. Training then goes on bit for bit as if it had not stopped
  /// (with the same thread count: the checkpoint's is a warning's business, not an error).
  void resume(const std::string& path);

  int64_t step() const { return step_; }
  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t total_steps() const { return steps_per_epoch_ * config_.epochs; }
  bool epoch_done() const { return step_ > 0 && step_ % steps_per_epoch_ == 0; }
  const VisionConfig& config() const { return config_; }
  VisionNet& model() { return *model_; }
  const std::vector<EpochRecord>& history() const { return history_; }
  int64_t num_parameters() const;
  int64_t train_images() const { return train_.images.size(0); }
  int64_t test_images() const { return test_.images.size(0); }
  double lr() const { return optimizer_->lr(); }
  /// The thread count the checkpoint resumed from was written with (0 before a resume).
  int64_t resumed_threads() const { return resumed_threads_; }

 private:
  const std::vector<int64_t>& order_of_epoch(int64_t epoch);

  VisionConfig config_;
  data::ImageDataset train_, test_;
  std::shared_ptr<VisionNet> model_;
  std::unique_ptr<optim::SGD> optimizer_;
  std::optional<DType> autocast_;
  int64_t steps_per_epoch_ = 0;
  int64_t step_ = 0;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
  // Sums over the current epoch's steps: loss, correct predictions, images.
  double epoch_loss_ = 0;
  int64_t epoch_correct_ = 0, epoch_images_ = 0;
  std::vector<EpochRecord> history_;
  int64_t resumed_threads_ = 0;
};

/// The first `limit` images and labels of `d` (all when limit is 0 or larger than the set).
data::ImageDataset first_images(const data::ImageDataset& d, int64_t limit);

/// Fashion-MNIST's class names, by label.
const std::vector<std::string>& fashion_mnist_classes();

/// confusion.svg: a 10 x 10 grid shaded by the fraction of each true class predicted as each
/// class, with the counts written in, and the accuracy in the title. Atomic.
void write_confusion_svg(const Evaluation& e, const std::string& path, const std::string& title);

}  // namespace adjoint::tools
