// Learning-rate schedules: constant, linear warmup, and cosine decay with optional warmup and a
// floor, both as pure functions of the step and as a Scheduler that sets an optimizer's lr.
// Steps count from 0: the lr for step s is the one used by the (s+1)-th optimizer.step().
#pragma once

#include <cstdint>
#include <functional>

#include "adjoint/optim/optimizer.h"

namespace adjoint::optim {

/// Maps a step (0, 1, 2, ...) to a learning rate.
using LrSchedule = std::function<double(int64_t step)>;

/// base_lr at every step.
double constant_lr(int64_t step, double base_lr);
/// base_lr * (step + 1) / warmup_steps while step < warmup_steps, then base_lr. The first step
/// already moves (lr base_lr / warmup_steps, never 0). warmup_steps 0 means no warmup.
double linear_warmup_lr(int64_t step, double base_lr, int64_t warmup_steps);
/// Linear warmup over warmup_steps (as above), then half a cosine from base_lr down to min_lr
/// at total_steps, and min_lr after it:
///   progress = (step - warmup_steps) / (total_steps - warmup_steps)
///   lr = min_lr + (base_lr - min_lr) * (1 + cos(pi * progress)) / 2
double cosine_lr(int64_t step, double base_lr, int64_t total_steps, int64_t warmup_steps = 0,
                 double min_lr = 0);

/// The same, as schedules. They validate their arguments (throwing adjoint::Error naming
/// "optim.schedule"): lr >= 0, warmup_steps >= 0, total_steps > warmup_steps, 0 <= min_lr <= lr.
LrSchedule constant_schedule(double base_lr);
LrSchedule linear_warmup_schedule(double base_lr, int64_t warmup_steps);
LrSchedule cosine_schedule(double base_lr, int64_t total_steps, int64_t warmup_steps = 0,
                           double min_lr = 0);

/// Sets an optimizer's lr from a schedule, keyed by the optimizer's own step_count(), so that a
/// run restored from a checkpoint (which restores step_count) continues on the same curve.
///
///   optim::Scheduler sched(opt, optim::cosine_schedule(3e-4, 5000, 100, 3e-5));
///   for (...) { ...; opt.step(); sched.step(); }
///
/// The constructor already sets the lr of the next step, so the first opt.step() uses
/// schedule(0). The optimizer must outlive the scheduler.
class Scheduler {
 public:
  Scheduler(Optimizer& optimizer, LrSchedule schedule);
  /// Sets the optimizer's lr to schedule(optimizer.step_count()) and returns it.
  double step();
  /// The lr the schedule gives for `step`.
  double lr_at(int64_t step) const { return schedule_(step); }

 private:
  Optimizer& optimizer_;
  LrSchedule schedule_;
};

}  // namespace adjoint::optim
