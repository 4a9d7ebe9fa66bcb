// Learning-rate schedules (constant, linear warmup, cosine decay) as pure functions and as
// LrSchedule closures, and the Scheduler that applies one to an optimizer.
#include "adjoint/optim/schedule.h"

#include <cmath>
#include <numbers>

#include "adjoint/error.h"

namespace adjoint::optim {
namespace {

constexpr const char* kOp = "optim.schedule";

void check_common(int64_t step, double base_lr, int64_t warmup_steps) {
  ADJOINT_CHECK(step >= 0, Value, kOp, "step must be >= 0: got ", step);
  ADJOINT_CHECK(std::isfinite(base_lr) && base_lr >= 0, Value, kOp,
                "base lr must be finite and >= 0: got ", base_lr);
  ADJOINT_CHECK(warmup_steps >= 0, Value, kOp, "warmup_steps must be >= 0: got ", warmup_steps);
}

void check_cosine(double base_lr, int64_t total_steps, int64_t warmup_steps, double min_lr) {
  check_common(0, base_lr, warmup_steps);
  ADJOINT_CHECK(total_steps > warmup_steps, Value, kOp,
                "cosine schedule needs total_steps > warmup_steps: got total_steps ", total_steps,
                ", warmup_steps ", warmup_steps);
  ADJOINT_CHECK(min_lr >= 0 && min_lr <= base_lr, Value, kOp,
                "min_lr must be in [0, base lr]: got min_lr ", min_lr, ", base lr ", base_lr);
}

// (step + 1) / warmup: the first step gets a non-zero lr, the last warmup step the full one.
double warmup_factor(int64_t step, int64_t warmup_steps) {
  return static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
}

}  // namespace

double constant_lr(int64_t step, double base_lr) {
  check_common(step, base_lr, 0);
  return base_lr;
}

double linear_warmup_lr(int64_t step, double base_lr, int64_t warmup_steps) {
  check_common(step, base_lr, warmup_steps);
  if (step < warmup_steps) return base_lr * warmup_factor(step, warmup_steps);
  return base_lr;
}

double cosine_lr(int64_t step, double base_lr, int64_t total_steps, int64_t warmup_steps,
                 double min_lr) {
  ADJOINT_CHECK(step >= 0, Value, kOp, "step must be >= 0: got ", step);
  check_cosine(base_lr, total_steps, warmup_steps, min_lr);
  if (step < warmup_steps) return base_lr * warmup_factor(step, warmup_steps);
  if (step >= total_steps) return min_lr;
  const double progress =
      static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  return min_lr + (base_lr - min_lr) * 0.5 * (1 + std::cos(std::numbers::pi * progress));
}

LrSchedule constant_schedule(double base_lr) {
  check_common(0, base_lr, 0);
  return [base_lr](int64_t step) { return constant_lr(step, base_lr); };
}

LrSchedule linear_warmup_schedule(double base_lr, int64_t warmup_steps) {
  check_common(0, base_lr, warmup_steps);
  return [=](int64_t step) { return linear_warmup_lr(step, base_lr, warmup_steps); };
}

LrSchedule cosine_schedule(double base_lr, int64_t total_steps, int64_t warmup_steps,
                           double min_lr) {
  check_cosine(base_lr, total_steps, warmup_steps, min_lr);
  return [=](int64_t step) { return cosine_lr(step, base_lr, total_steps, warmup_steps, min_lr); };
}

Scheduler::Scheduler(Optimizer& optimizer, LrSchedule schedule)
    : optimizer_(optimizer), schedule_(std::move(schedule)) {
  ADJOINT_CHECK(static_cast<bool>(schedule_), Value, "optim.Scheduler", "got an empty schedule");
  step();
}

double Scheduler::step() {
  const double lr = schedule_(optimizer_.step_count());
  optimizer_.set_lr(lr);
  return lr;
}

}  // namespace adjoint::optim
