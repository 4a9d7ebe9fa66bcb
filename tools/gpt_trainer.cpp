// The training loop, checkpoints and generation; see gpt_trainer.h (and run_state.h for what a
// checkpoint records).
#include "gpt_trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numbers>
#include <optional>

#include "run_state.h"

namespace adjoint::tools {
namespace {

// The dropout layers that draw random numbers, by module name: their generators are part of
// the run's state (see Note [What a resume restores]).
std::vector<std::pair<std::string, nn::Dropout*>> active_dropouts(nn::LanguageModel& model) {
  std::vector<std::pair<std::string, nn::Dropout*>> out;
  for (const auto& [name, m] : model.named_modules())
    if (auto* d = dynamic_cast<nn::Dropout*>(m.get()); d && d->p() > 0) out.emplace_back(name, d);
  return out;
}

}  // namespace

DataIdentity identity_of(const data::ByteDataset& data) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64: offset basis, then xor and multiply
  for (uint8_t b : data.bytes()) h = (h ^ b) * 0x100000001b3ull;
  return {static_cast<int64_t>(data.bytes().size()), data.train_size(), h};
}

std::optional<DType> autocast_dtype_of(const std::string& precision) {
  if (precision == "fp32") return std::nullopt;
  if (precision == "bf16") return DType::BFloat16;
  if (precision == "fp16") return DType::Float16;
  throw Error(ErrorKind::Value, "train",
              "--precision must be fp32, bf16 or fp16, got '" + precision + "'");
}

nn::LlamaConfig llama_config_of(const TrainConfig& c) {
  return {.vocab = c.model.vocab,
          .context = c.model.context,
          .d_model = c.model.d_model,
          .heads = c.model.heads,
          .kv_heads = c.kv_heads > 0 ? c.kv_heads : c.model.heads,
          .layers = c.model.layers,
          .hidden = c.mlp_width};
}

std::shared_ptr<nn::LanguageModel> make_model(const TrainConfig& c, Generator* gen) {
  ADJOINT_CHECK(c.attention.empty() || c.attention == "math" || c.attention == "fused", Value,
                "train", "--attention must be math or fused, got '", c.attention, "'");
  if (c.arch == "gpt") {
    auto gpt = std::make_shared<nn::GPT>(c.model, gen);
    for (const auto& block : gpt->blocks->children())
      std::dynamic_pointer_cast<nn::Block>(block)->attn->fused = c.attention == "fused";
    return gpt;
  }
  ADJOINT_CHECK(c.arch == "llama", Value, "train", "--arch must be gpt or llama, got '", c.arch,
                "'");
  ADJOINT_CHECK(c.attention != "math", Value, "train",
                "--attention math is a GPT's: a Llama's attention runs on the fused kernel only");
  ADJOINT_CHECK(c.model.dropout == 0, Value, "train", "a Llama has no dropout, got dropout ",
                c.model.dropout);
  return std::make_shared<nn::Llama>(llama_config_of(c), gen);
}

double learning_rate(const TrainConfig& c, int64_t step) {
  if (step < c.warmup) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup);
  const double span = std::max<int64_t>(1, c.steps - c.warmup);
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup) / span);
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1 + std::cos(std::numbers::pi * progress));
}

Trainer::Trainer(const TrainConfig& config, const data::ByteDataset& data, ParallelOptions parallel)
    : config_(config),
      data_(data),
      data_id_(identity_of(data)),
      data_gen_(config.seed * 2 + 1),
      autocast_(autocast_dtype_of(config.precision)) {
  // float16's range needs loss scaling; bfloat16 has float32's (docs/mixed-precision.md).
  if (autocast_ == DType::Float16)
    scaler_.emplace(optim::GradScalerOptions{.init_scale = config.init_loss_scale});
  ADJOINT_CHECK(!config.master_weights || autocast_, Value, "train",
                "--master-weights keeps 16-bit weights: it needs --precision bf16 or fp16, got ",
                config.precision);
  Generator init(config.seed);
  model_ = make_model(config, &init);
  // Initialised in float32 (the same draws as every precision), then rounded once.
  if (config.master_weights) model_->to(*autocast_);
  params_ = model_->parameters();
  optimizer_ = std::make_unique<optim::AdamW>(
      params_, optim::AdamWOptions{.lr = config.lr, .weight_decay = config.weight_decay});
  if (config.master_weights) optimizer_->keep_master_weights();
  set_checkpointing(config.checkpoint);
  set_parallel(parallel);
}

Trainer::~Trainer() = default;

// Note [Data-parallel training]
// Every rank draws the same global batch from the same generator and trains on its 1/N of the
// rows, so N ranks see exactly the batches one process would, and the batch order's state in
// a checkpoint is the same whatever the world size. DistributedDataParallel averages the
// gradients while backward runs (with ZeRO, each rank then updates its shard of the
// parameters and all-gathers them); the loss reported is the ranks' average, the loss of the
// whole batch. Checkpoints are consolidated (ZeroOptimizer::state_dict), so a run saved under
// N ranks resumes under any number of ranks, ZeRO stage or none.
void Trainer::set_parallel(const ParallelOptions& parallel) {
  ADJOINT_CHECK(parallel.zero >= 0 && parallel.zero <= 2, Value, "train",
                "--zero must be 0, 1 or 2, got ", parallel.zero);
  ADJOINT_CHECK(parallel.group || parallel.zero == 0, Value, "train",
                "ZeRO needs a process group (ParallelOptions::group)");
  if (!parallel.group) return;
  group_ = parallel.group;
  const int world = group_->world_size();
  ADJOINT_CHECK(config_.batch % world == 0, Value, "train", "--batch ", config_.batch,
                " must be a multiple of the number of ranks (", world,
                "): each rank trains on an equal share of every batch");
  // ZeRO: each rank checks its shard of the gradients for overflow; the ranks combine their
  // flags so that all skip the same steps.
  if (scaler_ && parallel.zero > 0)
    scaler_.emplace(
        optim::GradScalerOptions{.init_scale = config_.init_loss_scale,
                                 .combine_found_inf = dist::found_inf_on_any_rank(*group_)});
  // The gradients live in DDP's buckets (one copy, not two), except under ZeRO-2's shards.
  ddp_ = std::make_unique<dist::DistributedDataParallel>(
      *model_, dist::DdpOptions{.group = group_,
                                .zero_stage = parallel.zero,
                                .gradient_as_bucket_view = parallel.zero < 2});
  if (parallel.zero == 0) return;
  const optim::AdamWOptions options{.lr = config_.lr, .weight_decay = config_.weight_decay};
  const bool master = config_.master_weights;
  zero_ = std::make_unique<dist::ZeroOptimizer>(
      *ddp_, [options, master](const std::vector<Tensor>& shard) {
        auto adamw = std::make_unique<optim::AdamW>(shard, options);
        if (master) adamw->keep_master_weights();
        return adamw;
      });
  optimizer_.reset();
}

void Trainer::set_checkpointing(const std::string& mode) {
  model_->run_blocks = sequential_runner(
      mode,
      [](const CheckpointPlan& plan) { std::fprintf(stderr, "%s", plan.to_string().c_str()); },
      "train");
  config_.checkpoint = mode;
}

double Trainer::train_step(MemoryTimeline* timeline, GradientHealth* health) {
  model_->train();
  const double lr = learning_rate(config_, step_);
  zero_ ? zero_->set_lr(lr) : optimizer_->set_lr(lr);
  data::TextBatch b =
      data_.batch(data::Split::Train, config_.batch, config_.model.context, data_gen_);
  if (group_) {  // this rank's rows of the global batch (Note [Data-parallel training])
    const int64_t rows = config_.batch / group_->world_size();
    b.inputs = b.inputs.narrow(0, group_->rank() * rows, rows);
    b.targets = b.targets.narrow(0, group_->rank() * rows, rows);
  }
  zero_ ? zero_->zero_grad() : optimizer_->zero_grad();
  Tensor loss;
  {
    std::optional<Autocast> amp;
    if (autocast_) amp.emplace(*autocast_);
    loss = model_->loss(b.inputs, b.targets);
  }
  (scaler_ ? scaler_->scale(loss) : loss).backward();
  if (timeline) timeline->stop();  // forward and backward only: not the optimizer
  double loss_value = loss.item<double>();
  if (group_ && group_->world_size() > 1) {  // the whole batch's loss
    Tensor l = full({1}, loss_value, DType::Float64);
    group_->all_reduce(l, dist::ReduceOp::Average);
    loss_value = l.item<double>();
  }
  // The health records read whole, unscaled gradients: ZeRO-2 keeps only shards, and ZeRO-1
  // under fp16 unscales only its shard.
  const int stage = ddp_ ? ddp_->zero_stage() : 0;
  if (stage == 2 || (stage == 1 && scaler_)) health = nullptr;
  // fp16: the gradients divided by the scale again, and whether one overflowed (then this step
  // changes nothing: no update, no health record, and the scale backs off).
  last_skipped_ = false;
  if (scaler_) {
    zero_ ? zero_->unscale_(*scaler_) : scaler_->unscale_(*optimizer_);
    last_skipped_ = scaler_->found_inf(zero_ ? zero_->shard_optimizer() : *optimizer_);
  }
  if (health && !last_skipped_) health->after_backward(step_ + 1, loss_value);
  if (config_.grad_clip > 0 && !last_skipped_) {
    if (zero_) {
      zero_->clip_grad_norm_(config_.grad_clip);  // the global norm over every rank's shard
    } else {
      optim::clip_grad_norm_(params_, config_.grad_clip);
    }
  }
  if (scaler_) {
    zero_ ? zero_->step(*scaler_) : scaler_->step(*optimizer_);
    scaler_->update();
    skipped_steps_ += last_skipped_ ? 1 : 0;
  } else if (zero_) {
    zero_->step();
  } else {
    optimizer_->step();
  }
  if (health && !last_skipped_) health->after_update();
  ++step_;
  return loss_value;
}

double Trainer::evaluate(data::Split split) {
  model_->eval();
  Generator gen(12345);
  double total = 0;
  NoGradGuard no_grad;
  std::optional<Autocast> amp;  // evaluated in the precision it trains in
  if (autocast_) amp.emplace(*autocast_);
  for (int64_t i = 0; i < config_.eval_batches; ++i) {
    data::TextBatch b = data_.batch(split, config_.batch, config_.model.context, gen);
    total += model_->loss(b.inputs, b.targets).item<double>();
  }
  model_->train();
  return total / static_cast<double>(config_.eval_batches);
}

// Note [What a resume restores]
// A resumed run must compute what the uninterrupted one would have, bit for bit. Its inputs:
// the weights and AdamW's moments and step (the tensors), the step (the learning rate
// schedule), the batch order's generator, each active dropout layer's generator, and every
// setting of TrainConfig, which the schedule (steps, warmup, lr, min_lr), the update
// (weight_decay, grad_clip), the batches (batch, context) and the model read. The settings are
// compared rather than restored, so that a resume never silently runs something else. The
// corpus is compared by size, split and hash. The activation checkpointing mode only trades
// memory for recomputation (the same values), and evaluation draws from its own generator, so
// neither is part of the trajectory.

void Trainer::save(const std::string& path) const {
  RunState s{.config = config_,
             .data = data_id_,
             .step = step_,
             .data_gen = data_gen_.state(),
             .dropout_gens = {},
             .threads = get_num_threads(),
             .loss_scale = loss_scale(),
             .scaler_growth_tracker = scaler_ ? scaler_->growth_tracker() : 0,
             .skipped_steps = skipped_steps_};
  for (const auto& [name, d] : active_dropouts(*model_))
    s.dropout_gens[name] = d->generator().state();
  // ZeRO gathers the shards' state on every rank (a collective); the ranks hold the same
  // weights and state, and rank 0 writes them.
  const optim::StateDict optimizer_state = zero_ ? zero_->state_dict() : optimizer_->state_dict();
  if (rank() != 0) return;
  io::save_checkpoint(path, model_->named_parameters(), optimizer_state, encode_run_state(s));
}

void Trainer::resume(const std::string& path) {
  // Everything is checked before anything changes: the metadata, then (load_checkpoint) every
  // tensor, all from the one read of the file.
  const io::SafetensorsFile file = io::load_safetensors(path);
  const RunState s = decode_run_state(file.metadata, path);
  check_same_run(s.config, config_, path);
  check_same_data(s, data_id_, path);
  std::vector<std::pair<nn::Dropout*, Generator::State>> dropouts;
  for (const auto& [name, d] : active_dropouts(*model_)) {
    auto it = s.dropout_gens.find(name);
    ADJOINT_CHECK(it != s.dropout_gens.end(), IO, "train", "'", path, "': no 'dropout_gen.", name,
                  ".*' in its metadata (the generator of that dropout layer)");
    dropouts.emplace_back(d, it->second);
  }
  // AdamW's own step count must be the run's step less the skipped ones (a hand-edited 'step'
  // would desync them).
  for (const auto& [name, t] : file.tensors)
    if (name == std::string(io::kOptimizerPrefix) + "step" && t.dtype() == DType::Int64 &&
        t.numel() == 1)
      ADJOINT_CHECK(t.item<int64_t>() == s.step - s.skipped_steps, IO, "train", "'", path,
                    "': metadata 'step' is ", s.step, " with 'skipped_steps' ", s.skipped_steps,
                    " but the optimizer's step count (", name, ") is ", t.item<int64_t>());
  std::optional<optim::StateDict> scaler_state;
  if (scaler_) {
    scaler_state = scaler_->state_dict();  // the options as constructed, then the saved state
    for (auto& [key, t] : *scaler_state) {
      if (key == "scale") t = full({}, s.loss_scale, DType::Float64);
      if (key == "growth_tracker")
        t = full({}, static_cast<double>(s.scaler_growth_tracker), DType::Int64);
    }
    optim::GradScaler check = *scaler_;
    check.load_state_dict(*scaler_state);  // validated before anything changes
  }
  if (zero_) {
    // Each rank keeps its shard of the consolidated state (validated whole before anything
    // changes); then the weights, checked against the model before any is copied. The run
    // settings were compared above, so the weights' names and shapes match.
    zero_->load_state_dict(io::optimizer_state_of(file));
    io::load_checkpoint(file, path, model_->named_parameters(), nullptr);
  } else {
    io::load_checkpoint(file, path, model_->named_parameters(), optimizer_.get());
  }
  // Nothing below throws: the run is restored whole or not at all.
  step_ = s.step;
  if (scaler_) scaler_->load_state_dict(*scaler_state);
  skipped_steps_ = s.skipped_steps;
  data_gen_.set_state(s.data_gen);
  for (auto& [d, state] : dropouts) d->generator().set_state(state);
}

std::shared_ptr<nn::LanguageModel> load_model(const std::string& path) {
  const io::SafetensorsFile file = io::load_safetensors(path);
  TrainConfig config;
  config.model = decode_model_config(file.metadata, path);
  config.arch = decode_arch(file.metadata, path, &config.kv_heads);
  std::shared_ptr<nn::LanguageModel> model = make_model(config, nullptr);
  // A run with --master-weights stored 16-bit weights: sample in their dtype.
  if (const auto m = file.metadata.find("master_weights");
      m != file.metadata.end() && m->second == "1")
    if (const auto p = file.metadata.find("precision"); p != file.metadata.end())
      if (const std::optional<DType> low = autocast_dtype_of(p->second)) model->to(*low);
  io::load_checkpoint(file, path, model->named_parameters(), nullptr, /*strict=*/false);
  model->eval();
  return model;
}

namespace {

// One byte from the last position's logits: top-k, then softmax at the temperature, one draw.
int64_t sample_byte(const Tensor& logits, double temperature, int64_t top_k, Generator& gen) {
  const int64_t t = logits.size(1);
  std::vector<float> last =
      logits.select(1, t - 1).reshape({-1}).to(DType::Float32).to_vector<float>();
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
  return static_cast<int64_t>(pick);
}

Tensor ids_tensor(const std::vector<int64_t>& ids, std::size_t from) {
  std::vector<int64_t> window(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end());
  const int64_t t = static_cast<int64_t>(window.size());
  return tensor(window, Shape{1, t});
}

}  // namespace

std::string generate(nn::LanguageModel& model, const std::string& prompt, int64_t length,
                     double temperature, int64_t top_k, Generator& gen, bool use_cache) {
  ADJOINT_CHECK(temperature > 0, Value, "generate", "temperature must be positive, got ",
                temperature);
  InferenceMode inference;
  const std::size_t context = static_cast<std::size_t>(model.context());
  std::vector<int64_t> ids;
  for (unsigned char ch : prompt) ids.push_back(ch);
  if (ids.empty()) ids.push_back('\n');
  auto window_start = [&](std::size_t keep) { return ids.size() > keep ? ids.size() - keep : 0; };
  nn::Llama* llama = use_cache ? dynamic_cast<nn::Llama*>(&model) : nullptr;
  std::vector<nn::KVCache> caches;
  if (llama) caches = llama->make_caches();
  std::string out;
  for (int64_t n = 0; n < length; ++n) {
    Tensor logits;
    if (!llama) {  // the whole window again
      logits = model.forward(ids_tensor(ids, window_start(context)));
    } else if (n == 0 || caches[0].length() == static_cast<int64_t>(context)) {
      // The prompt, or a full cache: (re)fill it from the last bytes (all of the prompt's
      // window; context / 2 once full, which leaves room for as many steps).
      for (nn::KVCache& c : caches) c.clear();
      logits = llama->forward(
          ids_tensor(ids, window_start(n == 0 ? context : std::max<std::size_t>(1, context / 2))),
          caches);
    } else {  // the newest byte only
      logits = llama->forward(ids_tensor(ids, ids.size() - 1), caches);
    }
    const int64_t pick = sample_byte(logits, temperature, top_k, gen);
    ids.push_back(pick);
    out += static_cast<char>(pick);
  }
  return out;
}

}  // namespace adjoint::tools
