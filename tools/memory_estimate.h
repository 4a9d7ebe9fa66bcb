// adjoint-train --estimate: the memory of one training step of a run's model, measured on the
// meta device (the model built there, a forward and backward run on meta tensors), so that a
// model this machine could not hold is planned without its memory (docs/devices.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpt_trainer.h"

namespace adjoint::tools {

/// One row of the estimate's per-module table: one module, or a run of alike siblings (the
/// blocks of a model), with the numbers of one of them.
struct ModuleMemory {
  std::string name;   ///< "wte", "blocks.0", or "blocks.0-79" for a run of alike modules
  std::string type;   ///< type_name()
  int64_t count = 1;  ///< modules in the row; every number below is one module's
  int64_t parameters = 0;
  std::size_t parameter_bytes = 0;
  std::size_t gradient_bytes = 0;   ///< measured: the .grad tensors backward left
  std::size_t optimizer_bytes = 0;  ///< AdamW: two float32 moments per parameter
  std::size_t master_bytes = 0;     ///< --master-weights: the float32 copies
  std::size_t saved_bytes = 0;      ///< measured: what its forward left saved for backward
  /// Measured: the most storage its forward had added at the end of any of its ops.
  std::size_t forward_peak_bytes = 0;
};

struct MemoryEstimate {
  int64_t parameters = 0;
  std::size_t parameter_bytes = 0;   ///< the weights as the run holds them
  std::size_t gradient_bytes = 0;    ///< measured: what backward leaves (the .grad tensors)
  std::size_t optimizer_bytes = 0;   ///< AdamW: two float32 moments per parameter
  std::size_t master_bytes = 0;      ///< --master-weights: the float32 copies AdamW updates
  std::size_t saved_peak_bytes = 0;  ///< measured: activations saved for backward, at the peak
  /// Measured: all storage a forward and backward add, at its peak (activations, temporaries
  /// and the gradients as they are made).
  std::size_t step_peak_bytes = 0;
  /// With --checkpoint budget=BYTES: the planner's plan, made on the meta step's profile.
  std::string plan;
  /// Per module: the model's children, a container child (the blocks) by its children.
  std::vector<ModuleMemory> modules;
  /// What the forward left saved outside every module of the table (the tied head's product
  /// and the loss, for a GPT).
  std::size_t saved_outside_modules_bytes = 0;
  /// What the process holds at the step's peak: the weights, the optimizer's state and masters
  /// (kept across steps), and the step's own peak.
  std::size_t total_peak_bytes() const {
    return parameter_bytes + optimizer_bytes + master_bytes + step_peak_bytes;
  }
  /// The same per rank under ZeRO `stage` (1: optimizer state and masters sharded, 2: the
  /// gradients too) over `world` ranks, each with batch / world sequences' activations scaled
  /// linearly (activations are per sequence).
  std::size_t per_rank_bytes(int stage, int world) const;
};

/// One step of `config`'s model (its arch, sizes, batch, precision, master weights and
/// checkpoint mode) on meta. Reads no data; allocates no tensor memory.
MemoryEstimate estimate_memory(const TrainConfig& config);

/// The table adjoint-train --estimate prints: each part, the total, whether it fits
/// `machine_bytes` (0: unknown), and when it does not, the cheapest settings that would make
/// it fit: a checkpoint mode (estimated again on meta), else ZeRO over a number of ranks.
std::string estimate_report(const TrainConfig& config, std::size_t machine_bytes);

}  // namespace adjoint::tools
