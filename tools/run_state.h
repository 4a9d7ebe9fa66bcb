// The metadata of an adjoint-train checkpoint: every setting the training trajectory depends
// on, the step, the data's identity and the random generators' states, as strings. Parsing is
// strict (a malformed key is a named error, never a crash) so that a resume validates all of
// it before touching a weight; comparing it with the flags refuses a resume that is not the
// same run. See docs/checkpoints.md, "Resuming adjoint-train".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "gpt_trainer.h"

namespace adjoint::tools {

/// Written as "version". A checkpoint without it (from an older adjoint-train, which recorded
/// only the model's shape) still loads in adjoint-sample but cannot be resumed.
inline constexpr int64_t kRunStateVersion = 2;

struct RunState {
  TrainConfig config;  ///< all of it; config.data only when it is printable ASCII
  DataIdentity data;
  int64_t step = 0;
  Generator::State data_gen{};
  std::map<std::string, Generator::State> dropout_gens;  ///< by module name, when dropout > 0
  int64_t threads = 1;  ///< kernel threads of the writer (bitwise identity needs the same)
  /// --precision fp16's GradScaler: its scale and good steps since the scale last changed,
  /// and the steps it skipped (AdamW's step count is step - skipped_steps).
  double loss_scale = 1;
  int64_t scaler_growth_tracker = 0;
  int64_t skipped_steps = 0;
};

io::Metadata encode_run_state(const RunState& state);
/// Parses and checks every key (types, ranges, 0 <= step <= steps, consistent generators).
/// Throws adjoint::Error (IO, op "train") naming the file, the key, its value and what was
/// expected.
RunState decode_run_state(const io::Metadata& metadata, const std::string& path);
/// load_safetensors + decode_run_state.
RunState read_run_state(const std::string& path);
/// Only the model's shape: all adjoint-sample needs, present in older checkpoints too.
nn::GPTConfig decode_model_config(const io::Metadata& metadata, const std::string& path);
/// The model's architecture, "gpt" or "llama" ("gpt" in checkpoints from before --arch), and
/// with a Llama its kv_heads into `kv_heads` when not null.
std::string decode_arch(const io::Metadata& metadata, const std::string& path,
                        int64_t* kv_heads = nullptr);

/// Throws adjoint::Error (Value, op "train") at the first setting where `given` differs from
/// `stored` (the checkpoint's), naming its flag, the checkpoint's value and the given value.
/// What does not shape the trajectory may differ: the activation checkpointing mode, the
/// data's path (its content is checked by check_same_data), eval_every and save_every.
void check_same_run(const TrainConfig& stored, const TrainConfig& given, const std::string& path);
/// Throws adjoint::Error (Value, op "train", naming --data) unless the corpus is the same.
void check_same_data(const RunState& stored, const DataIdentity& given, const std::string& path);

/// adjoint-train's flags on --resume: a setting whose flag `was_given` must agree with the
/// checkpoint (check_same_run's error otherwise), unless it may differ; every other setting
/// takes the checkpoint's value, so `--resume CKPT` alone continues the run.
void adopt_run_config(TrainConfig& config, const TrainConfig& stored,
                      const std::function<bool(std::string_view flag)>& was_given,
                      const std::string& path);

}  // namespace adjoint::tools
