// ZeRO (stages 1 and 2) on top of DistributedDataParallel: each rank keeps the optimizer state
// of its shard of the parameters only, updates that shard and all-gathers the parameters; with
// stage 2 it also holds only its shard of the gradients (DDP reduce-scatters the buckets).
// Checkpoints are consolidated: state_dict() is the state a plain optimizer over the model's
// parameters would save, so it loads under any world size, or into that plain optimizer.
// docs/distributed.md, "ZeRO".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "adjoint/distributed/ddp.h"
#include "adjoint/optim/grad_scaler.h"
#include "adjoint/optim/optimizer.h"

namespace adjoint::dist {

/// Builds the optimizer of one rank's shard: called once with the shard tensors (one flat
/// leaf per bucket). Elementwise optimizers (SGD, Adam, AdamW, ...) on flat shards update each
/// element exactly as they would inside its parameter.
using ShardOptimizerFactory =
    std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>& shard)>;

/// Per-rank bytes of what training keeps, for the memory report.
struct ZeroMemory {
  int64_t parameters = 0;       ///< the model's parameters (every rank holds them all)
  int64_t gradients = 0;        ///< .grad of the parameters, DDP's buckets and the shard gradients
  int64_t optimizer_state = 0;  ///< the shard optimizer's state (moments, master copies)
};

/// For GradScalerOptions::combine_found_inf: true on every rank when it is true on any.
/// Collective (each call is a one-element all-reduce).
std::function<bool(bool)> found_inf_on_any_rank(ProcessGroup& group);

class ZeroOptimizer {
 public:
  /// `ddp` must have been built with zero_stage 1 or 2 and outlive this object.
  ZeroOptimizer(DistributedDataParallel& ddp, const ShardOptimizerFactory& make_optimizer);
  ~ZeroOptimizer();
  ZeroOptimizer(const ZeroOptimizer&) = delete;
  ZeroOptimizer& operator=(const ZeroOptimizer&) = delete;

  /// Clears the parameters' .grad (set_to_none) or zeroes them, and the shard gradients.
  void zero_grad(bool set_to_none = true);
  /// Scales the gradients so that their global 2-norm (over every rank's shard) is at most
  /// max_norm, as optim::clip_grad_norm_ over the whole model; returns the norm before.
  /// Collective: every rank calls it.
  double clip_grad_norm_(double max_norm);
  /// Updates this rank's shard, then all-gathers the parameters. Collective.
  void step();
  /// Mixed precision: the GradScaler's unscale_ and step over this rank's shard gradients.
  /// The scaler must combine its overflow flag over the ranks (GradScalerOptions::
  /// combine_found_inf = found_inf_on_any_rank(group)): a rank sees only its shard, and ranks
  /// that disagree on skipping a step are an error on every rank. step returns whether it
  /// stepped. Collective.
  void unscale_(optim::GradScaler& scaler);
  bool step(optim::GradScaler& scaler);
  double lr() const { return inner_->lr(); }
  void set_lr(double lr) { inner_->set_lr(lr); }
  int64_t step_count() const { return inner_->step_count(); }
  /// The shard optimizer itself (its params() are the shard tensors, one per bucket).
  optim::Optimizer& shard_optimizer() { return *inner_; }

  /// The consolidated state: the keys and shapes a plain optimizer of the same kind over
  /// ddp.parameters() would save ("state.<i>.<slot>" for parameter i). Collective: every rank
  /// gets all of it (save it from rank 0).
  optim::StateDict state_dict();
  /// Loads a consolidated state (from any world size, or from the plain optimizer): each rank
  /// keeps its shard of it. Every rank passes the same state.
  void load_state_dict(const optim::StateDict& state);

  /// What this rank holds now.
  ZeroMemory memory() const;

 private:
  void gather_shard_gradients();
  void refresh_shards();
  bool update(optim::GradScaler* scaler);
  void all_gather_parameters();

  DistributedDataParallel& ddp_;
  ProcessGroup& group_;
  std::vector<Tensor> shard_;  // per bucket: this rank's chunk of the flattened parameters
  std::unique_ptr<optim::Optimizer> inner_;
  bool grads_ready_ = false;  // this step's shard gradients are in shard_[b].grad()
};

}  // namespace adjoint::dist
