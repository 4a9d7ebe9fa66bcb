// Dynamic loss scaling for float16 training, as torch.amp.GradScaler. float16's smallest
// positive value is about 6e-8, so small gradients underflow to zero; multiplying the loss by a
// large scale (2^16 to start) lifts the whole backward pass into float16's range, and the
// gradients are divided by it again before the optimizer sees them. The scale adapts: a step
// whose gradients hold an Inf or NaN is skipped and the scale halves; after `growth_interval`
// finite steps in a row it doubles. bfloat16 has float32's exponent range and needs none of
// this (docs/mixed-precision.md).
//
//   optim::GradScaler scaler;
//   for (...) {
//     opt.zero_grad();
//     { Autocast amp(DType::Float16); loss = model.loss(batch); }
//     scaler.scale(loss).backward();
//     scaler.unscale_(opt);                 // optional: clip the true gradients
//     optim::clip_grad_norm_(opt.params(), 1.0);
//     scaler.step(opt);                     // skipped if a gradient is not finite
//     scaler.update();
//   }
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "adjoint/optim/optimizer.h"
#include "adjoint/tensor.h"

namespace adjoint::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  ///< 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  ///< finite steps in a row before the scale grows
  bool enabled = true;             ///< false: every call passes through (loss unscaled)
  /// Combines this process's "some gradient is Inf or NaN" with the other processes' (an OR
  /// over the ranks), for data-parallel training whose ranks hold different gradients, such
  /// as ZeRO's shards (dist::found_inf_on_any_rank), so that every rank skips the same steps.
  /// Empty: this process's flag alone (plain data parallelism averages the gradients first,
  /// so an overflow anywhere reaches every rank).
  std::function<bool(bool)> combine_found_inf = {};
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  /// A copy has its own scale tensors (and is not the scaler a compiled step refers to).
  GradScaler(const GradScaler& other);
  GradScaler& operator=(const GradScaler& other);

  /// loss * scale (recorded: backward of the result gives scaled gradients). The scale is a
  /// 0-d float32 tensor, as PyTorch's, so a compiled function reads it at every call.
  Tensor scale(const Tensor& loss) const;

  /// Divides the .grad of opt's parameters by the scale, in place, and records whether any
  /// is Inf or NaN. At most once per optimizer between update()s; step() calls it if not.
  void unscale_(Optimizer& opt);

  /// opt.step() unless unscaling found an Inf or NaN; returns whether it stepped. Inside a
  /// compiled function (docs/compile.md, "Training steps") the unscaling is traced and the
  /// step is one node that each call runs or skips; it then returns true, and found_inf(opt)
  /// says after the call whether that call skipped.
  bool step(Optimizer& opt);

  /// Ends the iteration: halves the scale (backoff) if any optimizer's gradients were not
  /// finite, else counts a good step and grows the scale after growth_interval of them.
  /// `new_scale` sets the scale directly instead.
  void update(std::optional<double> new_scale = std::nullopt);

  /// The current scale (1 when disabled).
  double get_scale() const { return options_.enabled ? scale_ : 1.0; }
  bool is_enabled() const { return options_.enabled; }
  /// Good steps since the scale last changed.
  int64_t growth_tracker() const { return growth_tracker_; }
  /// Whether the last unscale_ of `opt` in this iteration found an Inf or NaN.
  bool found_inf(const Optimizer& opt) const;

  /// "scale", "growth_factor", "backoff_factor" (0-d float64), "growth_interval" and
  /// "growth_tracker" (0-d int64): what a checkpoint needs to resume bit-identically.
  StateDict state_dict() const;
  /// Validates every entry first; on an error nothing changes.
  void load_state_dict(const StateDict& state);

 private:
  enum class Stage { Ready, Unscaled, Stepped };
  /// step() inside a compiled function: unscaling traced, the rest an effect of each replay.
  void record_traced_step(Optimizer& opt);
  /// update() as it runs, eagerly or as an effect of a compiled function's replay.
  void update_now(std::optional<double> new_scale);
  /// Sets the scale and the tensors that hold it and its reciprocal.
  void set_scale(double scale);
  struct PerOptimizer {
    Stage stage = Stage::Ready;
    bool found_inf = false;
  };

  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  std::map<const Optimizer*, PerOptimizer> per_optimizer_;  // this iteration's, cleared by update
  Tensor scale_tensor_;      ///< 0-d float32: what scale() multiplies by
  Tensor inv_scale_tensor_;  ///< 0-d float64, 1 / scale: what a traced unscaling multiplies by
  /// Points at this scaler while it lives: a compiled step holds it weakly.
  std::shared_ptr<GradScaler*> alive_;
};

}  // namespace adjoint::optim
