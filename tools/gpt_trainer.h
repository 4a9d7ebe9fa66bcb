// The language-model training loop behind adjoint-train (a GPT or a Llama, --arch), as a
// library so that tests can run it: one
// AdamW step at a time with warmup + cosine learning rate and gradient clipping, validation
// loss, checkpoints that resume bit-identically (run_state.h says what they record), and text
// generation for adjoint-sample.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/data/text.h"
#include "adjoint/distributed.h"
#include "adjoint/io.h"
#include "adjoint/nn.h"
#include "adjoint/optim.h"
#include "gradient_health.h"

namespace adjoint::tools {

struct TrainConfig {
  /// "gpt" (nn::GPT) or "llama" (nn::Llama, with llama_config_of's settings).
  std::string arch = "gpt";
  /// The model's sizes; a Llama reads vocab, context, d_model, heads and layers from here (and
  /// has no dropout).
  nn::GPTConfig model{.vocab = 256, .context = 64, .d_model = 128, .heads = 4, .layers = 4};
  /// A Llama's key/value heads (0: as many as heads); a GPT has none of its own.
  int64_t kv_heads = 0;
  /// The attention core: "math" (matmul / masked softmax / matmul, which keeps the
  /// [B, H, T, T] probabilities for backward), "fused" (one scaled_dot_product_attention op,
  /// which keeps one log-sum-exp per row instead; docs/attention.md), or "" for the
  /// architecture's own (a GPT's math, a Llama's fused; a Llama has no math path). The same
  /// function either way, so checkpoints do not record it and a resume may switch.
  std::string attention;
  /// A Llama's SwiGLU width (0: llama_hidden(d_model)). Only --estimate sets another (with
  /// --vocab, to plan models of other sizes than the byte-level ones this trainer trains), so
  /// checkpoints do not record it.
  int64_t mlp_width = 0;
  int64_t batch = 32;
  int64_t steps = 1000;
  double lr = 3e-3;           ///< peak learning rate, after warmup
  double min_lr = 3e-4;       ///< end of the cosine decay
  int64_t warmup = 50;        ///< linear warmup steps
  double weight_decay = 0.1;  ///< AdamW's decoupled decay
  double grad_clip = 1.0;     ///< max global gradient norm (0: off)
  uint64_t seed = 0;          ///< model init and the batch order
  int64_t eval_batches = 8;   ///< validation batches per evaluation
  /// Activation checkpointing of the blocks: "none", "block" (each block), "sqrt"
  /// (checkpoint_sequential with ceil(sqrt(layers)) segments), or "budget=BYTES" (such as
  /// budget=64M: the blocks to checkpoint are planned on the first step so that their saved
  /// activations fit, see checkpoint_budget.h). Gradients are the same.
  std::string checkpoint = "none";
  /// Where the corpus came from (--data). Only recorded, so that a resume without --data
  /// finds it again: the data itself is identified by content (DataIdentity).
  std::string data;
  /// adjoint-train's loop: steps between validation losses and between checkpoints (0: at
  /// the end only). The Trainer does not read them; they are recorded so that a resume keeps
  /// them, and may differ on resume.
  int64_t eval_every = 100;
  int64_t save_every = 0;
  /// "fp32"; "bf16" (autocast to bfloat16: float32 weights, bfloat16 matmuls); or "fp16"
  /// (autocast to float16 with a GradScaler: steps whose gradients overflow are skipped).
  std::string precision = "fp32";
  /// fp16's initial loss scale (PyTorch's GradScaler default, 2^16).
  double init_loss_scale = 65536.0;
  /// With bf16 or fp16: the weights themselves are 16-bit (half the parameter and gradient
  /// memory), and AdamW updates float32 master copies of them (its moments in float32 too),
  /// rounding each into its weight after the step (Optimizer::keep_master_weights).
  bool master_weights = false;
};

/// The autocast dtype of a --precision value (nullopt for fp32); throws for an unknown one.
std::optional<DType> autocast_dtype_of(const std::string& precision);

/// The Llama of a run: its sizes from config.model, kv_heads (heads when 0), the SwiGLU width
/// llama_hidden(d_model), RoPE base 10000, RMSNorm eps 1e-5, an untied head (Meta's).
nn::LlamaConfig llama_config_of(const TrainConfig& config);
/// A new model of config.arch, initialised from `gen`; throws naming --arch for an unknown one.
std::shared_ptr<nn::LanguageModel> make_model(const TrainConfig& config, Generator* gen);

/// What identifies a corpus for a resume: its size, its split and a hash of its bytes.
struct DataIdentity {
  int64_t bytes = 0;        ///< all bytes, training and validation
  int64_t train_bytes = 0;  ///< the training split's
  uint64_t fnv1a = 0;       ///< FNV-1a 64 of all bytes
  bool operator==(const DataIdentity&) const = default;
};
DataIdentity identity_of(const data::ByteDataset& data);

/// How the run spreads over processes: not a setting of the run (a checkpoint resumes under
/// any world size and any stage), so it lives beside TrainConfig, not in it.
struct ParallelOptions {
  /// The ranks that train together, each on its 1/N of every batch, with gradients averaged
  /// by DistributedDataParallel; null: this process alone, as without MPI.
  dist::ProcessGroup* group = nullptr;
  /// ZeRO stage with a group (0: plain data parallel; 1: optimizer state sharded; 2: the
  /// gradients too). The gradient health records and NaN stop read whole, unscaled
  /// gradients, so they are off with stage 2, and with stage 1 under fp16.
  int zero = 0;
};

/// The model, optimizer, schedule and data order of one training run.
class Trainer {
 public:
  Trainer(const TrainConfig& config, const data::ByteDataset& data, ParallelOptions parallel = {});
  ~Trainer();

  /// One step on a fresh training batch; returns its loss (before the update). With a
  /// timeline, its forward and backward are recorded into it. With `health`, the gradients are
  /// checked and recorded after backward (before clipping) and the update after it; a NaN or
  /// infinite gradient throws before the weights change.
  double train_step(MemoryTimeline* timeline = nullptr, GradientHealth* health = nullptr);
  /// Mean loss over eval_batches batches of a split, drawn from a generator seeded the same
  /// way every time, so evaluations are comparable and do not disturb the training order.
  double evaluate(data::Split split);

  /// Saves model, optimizer state, the step, every random generator's state, all of config()
  /// and the data's identity (see run_state.h), atomically. With a group every rank calls it
  /// (ZeRO consolidates the optimizer state) and rank 0 writes the file.
  void save(const std::string& path) const;
  /// Restores what save() wrote. Every setting in the checkpoint must equal config()'s (the
  /// activation checkpointing mode and the data's path aside) and the data must be the same
  /// bytes; all metadata is validated first. On any mismatch or malformed entry it throws an
  /// adjoint::Error naming the setting or key, and model, optimizer and step are unchanged.
  /// Training then goes on bit for bit as if it had never stopped.
  void resume(const std::string& path);

  int64_t step() const { return step_; }
  const TrainConfig& config() const { return config_; }
  const DataIdentity& data_identity() const { return data_id_; }
  nn::LanguageModel& model() { return *model_; }
  /// The AdamW of one process or of plain data parallelism (not ZeRO: see zero_optimizer()).
  const optim::AdamW& optimizer() const {
    ADJOINT_CHECK(optimizer_, Value, "train",
                  "optimizer(): this run uses ZeRO; see zero_optimizer()");
    return *optimizer_;
  }
  /// With ZeRO, the sharded optimizer; else null.
  dist::ZeroOptimizer* zero_optimizer() const { return zero_.get(); }
  /// This process's rank and the number of ranks training together (0 and 1 alone).
  int rank() const { return group_ ? group_->rank() : 0; }
  int world_size() const { return group_ ? group_->world_size() : 1; }
  /// Applies config().checkpoint to the model (the constructor does; throws on a bad mode).
  void set_checkpointing(const std::string& mode);
  double lr() const { return zero_ ? zero_->lr() : optimizer_->lr(); }
  /// fp16's loss scale (1 otherwise), and the steps it skipped because a gradient overflowed.
  double loss_scale() const { return scaler_ ? scaler_->get_scale() : 1.0; }
  int64_t skipped_steps() const { return skipped_steps_; }
  /// Whether the last train_step skipped its update.
  bool last_step_skipped() const { return last_skipped_; }

 private:
  void set_parallel(const ParallelOptions& parallel);

  TrainConfig config_;
  const data::ByteDataset& data_;
  DataIdentity data_id_;
  std::shared_ptr<nn::LanguageModel> model_;
  std::unique_ptr<optim::AdamW> optimizer_;  // one process or plain DDP
  dist::ProcessGroup* group_ = nullptr;
  std::unique_ptr<dist::DistributedDataParallel> ddp_;
  std::unique_ptr<dist::ZeroOptimizer> zero_;  // ZeRO stages 1 and 2
  std::vector<Tensor> params_;
  Generator data_gen_;
  int64_t step_ = 0;
  std::optional<DType> autocast_;            // the forward's low dtype (bf16, fp16)
  std::optional<optim::GradScaler> scaler_;  // fp16 only
  int64_t skipped_steps_ = 0;
  bool last_skipped_ = false;
};

/// The learning rate at `step`: linear warmup to lr, then cosine decay to min_lr at the end.
double learning_rate(const TrainConfig& config, int64_t step);

/// A model rebuilt from a checkpoint's configuration and weights (for adjoint-sample): a GPT, or
/// a Llama when its metadata says arch "llama".
std::shared_ptr<nn::LanguageModel> load_model(const std::string& path);

/// Continues `prompt` by `length` bytes, sampling each from softmax(logits / temperature)
/// restricted to the top_k most likely bytes (0: all), with `gen`. The model sees the last
/// `context` bytes. A Llama with `use_cache` keeps its keys and values (nn::KVCache): the
/// prompt once, then one byte per step; when the cache is full it starts again from the last
/// context / 2 bytes. Up to `context` bytes in all, that is the same text as without the cache,
/// which runs the whole window again for every byte (a GPT always does).
std::string generate(nn::LanguageModel& model, const std::string& prompt, int64_t length,
                     double temperature, int64_t top_k, Generator& gen, bool use_cache = true);

}  // namespace adjoint::tools
