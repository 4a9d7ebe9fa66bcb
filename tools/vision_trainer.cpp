// adjoint-vision's model, training step, evaluation and checkpoints (vision_trainer.h).
#include "vision_trainer.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numbers>
#include <sstream>

#include "adjoint/io.h"
#include "adjoint/io/text_file.h"

namespace adjoint::tools {
namespace {

constexpr const char* kFormat = "adjoint-vision";
constexpr int64_t kVersion = 1;
constexpr int64_t kEvalBatch = 500;

std::string exact(double v) {  // %.17g reads back to the same double
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

// The settings as flag name -> value: written into checkpoints, and compared one by one on
// resume so that the error names the flag.
std::vector<std::pair<std::string, std::string>> settings_of(const VisionConfig& c) {
  return {{"channels", join(c.channels)},
          {"blocks", join(blocks_per_stage(c))},
          {"epochs", std::to_string(c.epochs)},
          {"batch", std::to_string(c.batch)},
          {"lr", exact(c.lr)},
          {"momentum", exact(c.momentum)},
          {"weight-decay", exact(c.weight_decay)},
          {"warmup", std::to_string(c.warmup)},
          {"seed", std::to_string(c.seed)},
          {"precision", c.precision},
          {"train-limit", std::to_string(c.train_limit)},
          {"test-limit", std::to_string(c.test_limit)}};
}

// Strict parsing of checkpoint metadata: a malformed value is a named error, never a crash.
struct MetaReader {
  const io::Metadata& m;
  const std::string& path;
  const std::string& get(const std::string& key) const {
    auto it = m.find(key);
    ADJOINT_CHECK(it != m.end(), IO, "vision", "'", path, "': no '", key, "' in its metadata");
    return it->second;
  }
  [[noreturn]] void fail(const std::string& key, const std::string& value) const {
    ADJOINT_CHECK(false, IO, "vision", "'", path, "': metadata '", key, "' is '", value,
                  "', not a valid value");
    std::abort();  // unreachable
  }
  int64_t integer(const std::string& key) const {
    const std::string& s = get(key);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) fail(key, s);
    return v;
  }
  double real(const std::string& key, const std::string& s) const {
    try {
      std::size_t used = 0;
      const double v = std::stod(s, &used);
      if (used == s.size()) return v;
    } catch (const std::exception&) {
    }
    fail(key, s);
  }
  double real(const std::string& key) const { return real(key, get(key)); }
};

// "step,train_loss,train_acc,test_loss,test_acc;..." with every double exact.
std::string encode_history(const std::vector<EpochRecord>& h) {
  std::string s;
  for (const EpochRecord& r : h) {
    if (!s.empty()) s += ';';
    s += std::to_string(r.step) + "," + exact(r.train_loss) + "," + exact(r.train_accuracy) + "," +
         exact(r.test_loss) + "," + exact(r.test_accuracy);
  }
  return s;
}

std::vector<EpochRecord> decode_history(const MetaReader& r) {
  const std::string& s = r.get("history");
  std::vector<EpochRecord> h;
  std::stringstream records(s);
  std::string rec;
  while (std::getline(records, rec, ';')) {
    std::stringstream fields(rec);
    std::vector<std::string> f;
    std::string x;
    while (std::getline(fields, x, ',')) f.push_back(x);
    if (f.size() != 5) r.fail("history", s);
    EpochRecord e;
    try {
      e.step = std::stoll(f[0]);
    } catch (const std::exception&) {
      r.fail("history", s);
    }
    e.train_loss = r.real("history", f[1]);
    e.train_accuracy = r.real("history", f[2]);
    e.test_loss = r.real("history", f[3]);
    e.test_accuracy = r.real("history", f[4]);
    h.push_back(e);
  }
  return h;
}

int64_t correct_of(const Tensor& logits, const Tensor& labels) {
  return argmax(logits, 1).eq(labels).sum().item<int64_t>();
}

}  // namespace

BasicBlock::BasicBlock(int64_t in, int64_t out, int64_t stride, Generator* gen)
    : Module("BasicBlock") {
  conv1_ = register_module("conv1",
                           std::make_shared<nn::Conv2d>(in, out, 3, stride, 1, 1, 1, false, gen));
  bn1_ = register_module("bn1", std::make_shared<nn::BatchNorm2d>(out));
  conv2_ =
      register_module("conv2", std::make_shared<nn::Conv2d>(out, out, 3, 1, 1, 1, 1, false, gen));
  bn2_ = register_module("bn2", std::make_shared<nn::BatchNorm2d>(out));
  if (in != out || stride != 1) {
    down_ = register_module("down",
                            std::make_shared<nn::Conv2d>(in, out, 1, stride, 0, 1, 1, false, gen));
    down_bn_ = register_module("down_bn", std::make_shared<nn::BatchNorm2d>(out));
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  const Tensor h = relu((*bn1_)((*conv1_)(x)));
  const Tensor y = (*bn2_)((*conv2_)(h));
  return relu(y + (down_ ? (*down_bn_)((*down_)(x)) : x));
}

std::vector<int64_t> blocks_per_stage(const VisionConfig& c) {
  ADJOINT_CHECK(c.blocks.size() == 1 || c.blocks.size() == c.channels.size(), Value, "vision",
                "--blocks needs one number, or one per stage of --channels ", join(c.channels),
                " (", c.channels.size(), "), got ", join(c.blocks));
  for (int64_t b : c.blocks)
    ADJOINT_CHECK(b > 0, Value, "vision", "--blocks must be positive, got ", join(c.blocks));
  return c.blocks.size() == 1 ? std::vector<int64_t>(c.channels.size(), c.blocks.front())
                              : c.blocks;
}

VisionNet::VisionNet(const VisionConfig& c, Generator* gen) : Module("VisionNet") {
  const int64_t c0 = c.channels.front();
  stem_ = register_module("stem", std::make_shared<nn::Conv2d>(1, c0, 3, 1, 1, 1, 1, false, gen));
  stem_bn_ = register_module("stem_bn", std::make_shared<nn::BatchNorm2d>(c0));
  stages_ = register_module("stages", std::make_shared<nn::Sequential>());
  const std::vector<int64_t> blocks = blocks_per_stage(c);
  int64_t in = c0;
  for (std::size_t s = 0; s < c.channels.size(); ++s)
    for (int64_t b = 0; b < blocks[s]; ++b) {
      const int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      stages_->push_back(std::make_shared<BasicBlock>(in, c.channels[s], stride, gen));
      in = c.channels[s];
    }
  head_ = register_module("head", std::make_shared<nn::Linear>(in, kClasses, true, gen));
}

Tensor VisionNet::forward(const Tensor& x) {
  Tensor h = relu((*stem_bn_)((*stem_)(x)));
  h = (*stages_)(h);
  return (*head_)(flatten(adaptive_avg_pool2d(h, {1}), 1));
}

double vision_learning_rate(const VisionConfig& c, int64_t step, int64_t total) {
  if (step < c.warmup) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup);
  const double span = static_cast<double>(std::max<int64_t>(1, total - c.warmup));
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup) / span);
  return 0.5 * c.lr * (1 + std::cos(std::numbers::pi * progress));
}

data::ImageDataset first_images(const data::ImageDataset& d, int64_t limit) {
  if (limit <= 0 || limit >= d.images.size(0)) return d;
  return {d.images.slice(0, 0, limit).contiguous(), d.labels.slice(0, 0, limit).contiguous()};
}

VisionTrainer::VisionTrainer(const VisionConfig& config, data::ImageDataset train,
                             data::ImageDataset test)
    : config_(config),
      train_(first_images(train, config.train_limit)),
      test_(first_images(test, config.test_limit)) {
  const VisionConfig& c = config_;
  ADJOINT_CHECK(c.epochs > 0 && c.batch > 0 && !c.blocks.empty() && !c.channels.empty() &&
                    c.warmup >= 0 && c.lr > 0 && c.momentum > 0 && c.weight_decay >= 0 &&
                    c.train_limit >= 0 && c.test_limit >= 0,
                Value, "vision",
                "--epochs, --batch, --lr and --momentum must be positive, --channels and --blocks "
                "non-empty and --warmup, --weight-decay and the limits non-negative");
  for (int64_t ch : c.channels)
    ADJOINT_CHECK(ch > 0, Value, "vision", "--channels must be positive, got ", join(c.channels));
  blocks_per_stage(c);  // throws on a bad --blocks before anything is built
  autocast_ = c.precision == "bf16" ? std::optional<DType>(DType::BFloat16) : std::nullopt;
  ADJOINT_CHECK(c.precision == "fp32" || c.precision == "bf16", Value, "vision",
                "--precision must be fp32 or bf16, got '", c.precision, "'");
  ADJOINT_CHECK(train_.images.size(0) >= c.batch, Value, "vision", "the training set has ",
                train_.images.size(0), " images, fewer than one batch of ", c.batch);
  ADJOINT_CHECK(test_.images.size(0) > 0, Value, "vision", "the test set is empty");
  steps_per_epoch_ = train_.images.size(0) / c.batch;  // the last partial batch is dropped
  Generator init(c.seed);
  model_ = std::make_shared<VisionNet>(c, &init);
  optimizer_ = std::make_unique<optim::SGD>(
      model_->parameters(),
      optim::SGDOptions{
          .lr = c.lr, .momentum = c.momentum, .nesterov = true, .weight_decay = c.weight_decay});
}

int64_t VisionTrainer::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : model_->parameters()) n += p.numel();
  return n;
}

// A Fisher-Yates shuffle from a generator seeded by (seed, epoch): the order of any epoch can
// be rebuilt from the step alone.
const std::vector<int64_t>& VisionTrainer::order_of_epoch(int64_t epoch) {
  if (epoch == order_epoch_) return order_;
  const int64_t n = train_.images.size(0);
  order_.resize(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) order_[static_cast<std::size_t>(i)] = i;
  Generator g(config_.seed * 1000003 + 7919 + static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order_[static_cast<std::size_t>(i)],
              order_[g.next_u64() % static_cast<uint64_t>(i + 1)]);
  order_epoch_ = epoch;
  return order_;
}

double VisionTrainer::train_step(GradientHealth* health) {
  const std::vector<int64_t>& order = order_of_epoch(step_ / steps_per_epoch_);
  const int64_t first = (step_ % steps_per_epoch_) * config_.batch;
  const Tensor index =
      tensor(std::vector<int64_t>(order.begin() + first, order.begin() + first + config_.batch));
  const Tensor x = index_select(train_.images, 0, index);
  const Tensor y = index_select(train_.labels, 0, index);

  model_->train();
  optimizer_->zero_grad();
  Tensor logits, loss;
  {
    std::optional<Autocast> amp;
    if (autocast_) amp.emplace(*autocast_);
    logits = (*model_)(x);
    loss = cross_entropy(logits, y);
  }
  loss.backward();
  const double loss_value = loss.item<double>();
  if (health) health->after_backward(step_ + 1, loss_value);
  optimizer_->set_lr(vision_learning_rate(config_, step_, total_steps()));
  optimizer_->step();
  if (health) health->after_update();
  epoch_loss_ += loss_value;
  epoch_correct_ += correct_of(logits.detach(), y);
  epoch_images_ += config_.batch;
  ++step_;
  return loss_value;
}

Evaluation VisionTrainer::evaluate() {
  NoGradGuard no_grad;
  model_->eval();
  Evaluation e;
  e.confusion.assign(kClasses, std::vector<int64_t>(kClasses, 0));
  const int64_t n = test_.images.size(0);
  double loss_sum = 0;
  for (int64_t i = 0; i < n; i += kEvalBatch) {
    const int64_t end = std::min(n, i + kEvalBatch);
    const Tensor x = test_.images.slice(0, i, end), y = test_.labels.slice(0, i, end);
    Tensor logits;
    {
      std::optional<Autocast> amp;
      if (autocast_) amp.emplace(*autocast_);
      logits = (*model_)(x);
    }
    logits = logits.to(DType::Float32);
    loss_sum += cross_entropy(logits, y).item<double>() * static_cast<double>(end - i);
    const std::vector<int64_t> predicted = argmax(logits, 1).to_vector<int64_t>();
    const std::vector<int64_t> truth = y.to_vector<int64_t>();
    for (std::size_t k = 0; k < truth.size(); ++k)
      ++e.confusion[static_cast<std::size_t>(truth[k])][static_cast<std::size_t>(predicted[k])];
  }
  model_->train();
  int64_t correct = 0;
  for (int64_t k = 0; k < kClasses; ++k) correct += e.confusion[k][k];
  e.images = n;
  e.loss = loss_sum / static_cast<double>(n);
  e.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  return e;
}

const EpochRecord& VisionTrainer::end_epoch(const Evaluation& e) {
  EpochRecord r;
  r.step = step_;
  const double images = static_cast<double>(std::max<int64_t>(1, epoch_images_));
  r.train_loss = epoch_loss_ * static_cast<double>(config_.batch) / images;
  r.train_accuracy = static_cast<double>(epoch_correct_) / images;
  r.test_loss = e.loss;
  r.test_accuracy = e.accuracy;
  history_.push_back(r);
  epoch_loss_ = 0;
  epoch_correct_ = epoch_images_ = 0;
  return history_.back();
}

void VisionTrainer::save(const std::string& path) const {
  io::Metadata m{{"format", kFormat},
                 {"version", std::to_string(kVersion)},
                 {"step", std::to_string(step_)},
                 {"threads", std::to_string(get_num_threads())},
                 {"epoch_loss", exact(epoch_loss_)},
                 {"epoch_correct", std::to_string(epoch_correct_)},
                 {"epoch_images", std::to_string(epoch_images_)},
                 {"history", encode_history(history_)}};
  for (const auto& [key, value] : settings_of(config_)) m["config." + key] = value;
  io::save_checkpoint(path, model_->state_dict(), optimizer_.get(), m);
}

void VisionTrainer::resume(const std::string& path) {
  const io::SafetensorsFile file = io::load_safetensors(path);
  const MetaReader r{file.metadata, path};
  ADJOINT_CHECK(r.get("format") == kFormat, IO, "vision", "'", path, "' is not an ", kFormat,
                " checkpoint (format '", r.get("format"), "')");
  ADJOINT_CHECK(r.integer("version") == kVersion, IO, "vision", "'", path, "': version ",
                r.get("version"), ", this adjoint-vision reads ", kVersion);
  for (const auto& [key, value] : settings_of(config_)) {
    std::string stored = r.get("config." + key);
    // Checkpoints written before --blocks took a list hold one number for every stage.
    if (key == "blocks" && stored.find(',') == std::string::npos && !config_.channels.empty()) {
      const std::string one = stored;
      for (std::size_t s = 1; s < config_.channels.size(); ++s) stored += "," + one;
    }
    ADJOINT_CHECK(stored == value, Value, "vision", "'", path, "' was trained with --", key, " ",
                  stored, ", this run has --", key, " ", value);
  }
  const int64_t step = r.integer("step");
  ADJOINT_CHECK(step >= 0 && step <= total_steps(), IO, "vision", "'", path, "': step ", step,
                " is outside 0..", total_steps());
  const double epoch_loss = r.real("epoch_loss");
  const int64_t epoch_correct = r.integer("epoch_correct"),
                epoch_images = r.integer("epoch_images");
  const int64_t threads = r.integer("threads");
  std::vector<EpochRecord> history = decode_history(r);
  // The weights, buffers and optimizer state are checked whole before any is copied.
  io::load_checkpoint(file, path, model_->state_dict(), optimizer_.get());
  step_ = step;
  epoch_loss_ = epoch_loss;
  epoch_correct_ = epoch_correct;
  epoch_images_ = epoch_images;
  history_ = std::move(history);
  resumed_threads_ = threads;
}

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                                 "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                                 "Bag",         "Ankle boot"};
  return names;
}

void write_confusion_svg(const Evaluation& e, const std::string& path, const std::string& title) {
  constexpr int kCell = 44, kLeft = 110, kTop = 60, kN = static_cast<int>(kClasses);
  const int width = kLeft + kN * kCell + 20, height = kTop + kN * kCell + 100;
  const auto& names = fashion_mnist_classes();
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s: test accuracy %.4f on %lld images", title.c_str(), e.accuracy,
                static_cast<long long>(e.images));
  s << "<text x=\"" << width / 2 << "\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">" << buf
    << "</text>\n"
    << "<text x=\"" << kLeft + kN * kCell / 2 << "\" y=\"" << kTop - 28
    << "\" text-anchor=\"middle\">predicted class</text>\n"
    << "<text x=\"14\" y=\"" << kTop + kN * kCell / 2
    << "\" text-anchor=\"middle\" transform=\"rotate(-90 14 " << kTop + kN * kCell / 2
    << ")\">true class</text>\n";
  for (int t = 0; t < kN; ++t) {
    int64_t row = 0;
    for (int p = 0; p < kN; ++p) row += e.confusion[t][p];
    s << "<text x=\"" << kLeft - 6 << "\" y=\"" << kTop + t * kCell + kCell / 2 + 4
      << "\" text-anchor=\"end\">" << names[t] << "</text>\n";
    for (int p = 0; p < kN; ++p) {
      const int64_t count = e.confusion[t][p];
      const double share = row > 0 ? static_cast<double>(count) / static_cast<double>(row) : 0;
      // white to dark blue by the share of the true class; correct cells in blue, errors in red
      const int shade = static_cast<int>(255 - 200 * std::sqrt(share));
      std::snprintf(buf, sizeof buf, t == p ? "rgb(%d,%d,255)" : "rgb(255,%d,%d)", shade, shade);
      s << "<rect x=\"" << kLeft + p * kCell << "\" y=\"" << kTop + t * kCell << "\" width=\""
        << kCell << "\" height=\"" << kCell << "\" fill=\"" << buf << "\" stroke=\"#ccc\"><title>"
        << names[t] << " predicted as " << names[p] << ": " << count << "</title></rect>\n"
        << "<text x=\"" << kLeft + p * kCell + kCell / 2 << "\" y=\""
        << kTop + t * kCell + kCell / 2 + 4 << "\" text-anchor=\"middle\" fill=\""
        << (share > 0.5 ? "white" : "black") << "\">" << count << "</text>\n";
    }
  }
  for (int p = 0; p < kN; ++p) {
    const int x = kLeft + p * kCell + kCell / 2, y = kTop + kN * kCell + 8;
    s << "<text x=\"" << x << "\" y=\"" << y << "\" text-anchor=\"end\" transform=\"rotate(-45 "
      << x << " " << y << ")\">" << names[p] << "</text>\n";
  }
  s << "</svg>\n";
  io::write_text_file_atomic(path, s.str(), "vision.write_confusion_svg");
}

}  // namespace adjoint::tools
