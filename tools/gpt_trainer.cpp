// The training loop, checkpoints and generation; see gpt_trainer.h.
#include "gpt_trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numbers>
#include <optional>

namespace adjoint::tools {
namespace {

// Everything a checkpoint must bring back besides tensors travels as metadata strings.
io::Metadata metadata_of(const TrainConfig& c, int64_t step, const Generator& gen) {
  const Generator::State s = gen.state();
  char normal[32];
  std::snprintf(normal, sizeof normal, "%a", s.cached_normal);  // exact, as hex float
  return {{"format", "adjoint-gpt"},
          {"vocab", std::to_string(c.model.vocab)},
          {"context", std::to_string(c.model.context)},
          {"d_model", std::to_string(c.model.d_model)},
          {"heads", std::to_string(c.model.heads)},
          {"layers", std::to_string(c.model.layers)},
          {"step", std::to_string(step)},
          {"data_gen.s0", std::to_string(s.s0)},
          {"data_gen.s1", std::to_string(s.s1)},
          {"data_gen.seed", std::to_string(s.seed)},
          {"data_gen.cached_normal", normal},
          {"data_gen.has_cached", s.has_cached ? "1" : "0"}};
}

const std::string& field(const io::Metadata& m, const std::string& key, const std::string& path) {
  auto it = m.find(key);
  ADJOINT_CHECK(it != m.end(), IO, "train", path, " is not a checkpoint of adjoint-train: no '",
                key, "' in its metadata");
  return it->second;
}

int64_t int_field(const io::Metadata& m, const std::string& key, const std::string& path) {
  const std::string& v = field(m, key, path);
  try {
    return std::stoll(v);
  } catch (const std::exception&) {
    ADJOINT_CHECK(false, IO, "train", path, ": metadata '", key, "' is not a number: ", v);
  }
  return 0;
}

nn::GPTConfig model_config_of(const io::Metadata& m, const std::string& path) {
  ADJOINT_CHECK(field(m, "format", path) == "adjoint-gpt", IO, "train", path,
                " is not a checkpoint of adjoint-train");
  nn::GPTConfig c;
  c.vocab = int_field(m, "vocab", path);
  c.context = int_field(m, "context", path);
  c.d_model = int_field(m, "d_model", path);
  c.heads = int_field(m, "heads", path);
  c.layers = int_field(m, "layers", path);
  return c;
}

}  // namespace

double learning_rate(const TrainConfig& c, int64_t step) {
  if (step < c.warmup) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup);
  const double span = std::max<int64_t>(1, c.steps - c.warmup);
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup) / span);
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1 + std::cos(std::numbers::pi * progress));
}

Trainer::Trainer(const TrainConfig& config, const data::ByteDataset& data)
    : config_(config), data_(data), data_gen_(config.seed * 2 + 1) {
  Generator init(config.seed);
  model_ = std::make_shared<nn::GPT>(config.model, &init);
  params_ = model_->parameters();
  optimizer_ = std::make_unique<optim::AdamW>(
      params_, optim::AdamWOptions{.lr = config.lr, .weight_decay = config.weight_decay});
  set_checkpointing(config.checkpoint);
}

void Trainer::set_checkpointing(const std::string& mode) {
  model_->run_blocks = sequential_runner(
      mode,
      [](const CheckpointPlan& plan) { std::fprintf(stderr, "%s", plan.to_string().c_str()); },
      "train");
  config_.checkpoint = mode;
}

double Trainer::train_step(MemoryTimeline* timeline) {
  model_->train();
  optimizer_->set_lr(learning_rate(config_, step_));
  data::TextBatch b =
      data_.batch(data::Split::Train, config_.batch, config_.model.context, data_gen_);
  optimizer_->zero_grad();
  Tensor loss = model_->loss(b.inputs, b.targets);
  loss.backward();
  if (timeline) timeline->stop();  // forward and backward only: not the optimizer
  if (config_.grad_clip > 0) optim::clip_grad_norm_(params_, config_.grad_clip);
  optimizer_->step();
  ++step_;
  return loss.item<double>();
}

double Trainer::evaluate(data::Split split) {
  model_->eval();
  Generator gen(12345);
  double total = 0;
  NoGradGuard no_grad;
  for (int64_t i = 0; i < config_.eval_batches; ++i) {
    data::TextBatch b = data_.batch(split, config_.batch, config_.model.context, gen);
    total += model_->loss(b.inputs, b.targets).item<double>();
  }
  model_->train();
  return total / static_cast<double>(config_.eval_batches);
}

void Trainer::save(const std::string& path) const {
  io::save_checkpoint(path, model_->named_parameters(), optimizer_.get(),
                      metadata_of(config_, step_, data_gen_));
}

void Trainer::resume(const std::string& path) {
  const io::Metadata m = io::load_checkpoint(path, model_->named_parameters(), optimizer_.get());
  const nn::GPTConfig c = model_config_of(m, path);
  ADJOINT_CHECK(c.vocab == config_.model.vocab && c.context == config_.model.context &&
                    c.d_model == config_.model.d_model && c.heads == config_.model.heads &&
                    c.layers == config_.model.layers,
                Value, "train", path, " holds a model with layers ", c.layers, ", width ",
                c.d_model, ", heads ", c.heads, ", context ", c.context,
                "; the flags ask for layers ", config_.model.layers, ", width ",
                config_.model.d_model, ", heads ", config_.model.heads, ", context ",
                config_.model.context);
  step_ = int_field(m, "step", path);
  Generator::State s;
  s.s0 = std::stoull(field(m, "data_gen.s0", path));
  s.s1 = std::stoull(field(m, "data_gen.s1", path));
  s.seed = std::stoull(field(m, "data_gen.seed", path));
  s.cached_normal = std::strtod(field(m, "data_gen.cached_normal", path).c_str(), nullptr);
  s.has_cached = field(m, "data_gen.has_cached", path) == "1";
  data_gen_.set_state(s);
}

std::shared_ptr<nn::GPT> load_model(const std::string& path) {
  const io::SafetensorsFile file = io::load_safetensors(path);
  auto model = std::make_shared<nn::GPT>(model_config_of(file.metadata, path));
  io::load_checkpoint(path, model->named_parameters(), nullptr, /*strict=*/false);
  model->eval();
  return model;
}

std::string generate(nn::GPT& model, const std::string& prompt, int64_t length, double temperature,
                     int64_t top_k, Generator& gen) {
  ADJOINT_CHECK(temperature > 0, Value, "generate", "temperature must be positive, got ",
                temperature);
  InferenceMode inference;
  const int64_t context = model.config().context;
  std::vector<int64_t> ids;
  for (unsigned char ch : prompt) ids.push_back(ch);
  if (ids.empty()) ids.push_back('\n');
  std::string out;
  for (int64_t n = 0; n < length; ++n) {
    const int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - context);
    std::vector<int64_t> window(ids.begin() + start, ids.end());
    const int64_t t = static_cast<int64_t>(window.size());
    Tensor logits = model.forward(tensor(window, Shape{1, t}));
    std::vector<float> last =
        logits.select(1, t - 1).reshape({-1}).to(DType::Float32).to_vector<float>();
    // Top-k: keep the k largest logits; then a softmax at the temperature and one draw.
    std::vector<float> sorted = last;
    if (top_k > 0 && top_k < static_cast<int64_t>(last.size())) {
      std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(),
                       std::greater<float>());
      const float cut = sorted[top_k - 1];
      for (float& v : last)
        if (v < cut) v = -INFINITY;
    }
    const float peak = *std::max_element(last.begin(), last.end());
    std::vector<double> p(last.size());
    double sum = 0;
    for (std::size_t i = 0; i < last.size(); ++i) {
      p[i] = std::isfinite(last[i]) ? std::exp((last[i] - peak) / temperature) : 0.0;
      sum += p[i];
    }
    double u = gen.next_double() * sum;
    std::size_t pick = 0;
    while (pick + 1 < p.size() && u >= p[pick]) u -= p[pick++];
    ids.push_back(static_cast<int64_t>(pick));
    out += static_cast<char>(pick);
  }
  return out;
}

}  // namespace adjoint::tools
