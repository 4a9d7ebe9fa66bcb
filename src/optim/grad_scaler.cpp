// GradScaler: torch.amp.GradScaler's state machine (scale, unscale_, step, update) over our
// optimizers. Per optimizer and iteration: Ready -> Unscaled (unscale_) -> Stepped (step);
// update() starts the next iteration.
#include "adjoint/optim/grad_scaler.h"

#include <cmath>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"

namespace adjoint::optim {
namespace {

constexpr const char* kOwner = "optim.GradScaler";

void check_options(const GradScalerOptions& o) {
  ADJOINT_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0, Value, kOwner,
                "init_scale must be finite and > 0: got ", o.init_scale);
  ADJOINT_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1, Value, kOwner,
                "growth_factor must be finite and > 1: got ", o.growth_factor);
  ADJOINT_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, Value, kOwner,
                "backoff_factor must be in (0, 1): got ", o.backoff_factor);
  ADJOINT_CHECK(o.growth_interval > 0, Value, kOwner, "growth_interval must be > 0: got ",
                o.growth_interval);
}

// Whether any element of g is Inf or NaN: max |g| is finite exactly when every element is
// (max propagates NaN), and unlike a sum it cannot overflow on finite values.
bool has_non_finite(const Tensor& g) {
  if (g.numel() == 0) return false;
  return !std::isfinite(g.abs().max().to(DType::Float64).item<double>());
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  check_options(options_);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  ADJOINT_CHECK(loss.defined() && is_floating(loss.dtype()), DType, kOwner,
                "scale expects a floating-point loss, got ",
                loss.defined() ? describe(loss) : std::string("an undefined tensor"));
  if (!options_.enabled) return loss;
  // As PyTorch, whose scale is a 0-d float32 tensor: a 0-d float16 loss is scaled in float32
  // (5 * 2^16 is past float16's 65504), and the gradient is cast back at the loss.
  if (loss.dim() == 0 && is_reduced_float(loss.dtype())) return loss.to(DType::Float32) * scale_;
  return loss * scale_;
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!options_.enabled) return;
  PerOptimizer& state = per_optimizer_[&opt];
  ADJOINT_CHECK(state.stage == Stage::Ready, Value, kOwner,
                state.stage == Stage::Unscaled
                    ? "unscale_() has already been called on this optimizer since the last update()"
                    : "unscale_() is being called after step()");
  NoGradGuard no_grad;
  // 1/scale in float64: exact for the powers of two the scale usually is.
  const double inv_scale = 1.0 / scale_;
  bool found = false;
  for (const Tensor& p : opt.params()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    found = found || has_non_finite(g);
    g.mul_(inv_scale);
  }
  if (options_.combine_found_inf) found = options_.combine_found_inf(found);
  state.found_inf = found;
  state.stage = Stage::Unscaled;
}

bool GradScaler::step(Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  PerOptimizer& state = per_optimizer_[&opt];
  ADJOINT_CHECK(state.stage != Stage::Stepped, Value, kOwner,
                "step() has already been called since the last update()");
  if (state.stage == Stage::Ready) unscale_(opt);
  state.stage = Stage::Stepped;
  if (state.found_inf) return false;
  opt.step();
  return true;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  if (new_scale) {
    ADJOINT_CHECK(std::isfinite(*new_scale) && *new_scale > 0, Value, kOwner,
                  "update: new_scale must be finite and > 0: got ", *new_scale);
    scale_ = *new_scale;
  } else {
    ADJOINT_CHECK(
        !per_optimizer_.empty(), Value, kOwner,
        "update: no unscale_() or step() since the last update(); nothing to update from");
    bool found = false;
    for (const auto& [opt, state] : per_optimizer_) found = found || state.found_inf;
    if (found) {
      scale_ *= options_.backoff_factor;
      growth_tracker_ = 0;
    } else if (++growth_tracker_ == options_.growth_interval) {
      // As PyTorch: a growth that would overflow to Inf keeps the old scale.
      if (const double grown = scale_ * options_.growth_factor; std::isfinite(grown))
        scale_ = grown;
      growth_tracker_ = 0;
    }
  }
  per_optimizer_.clear();
}

bool GradScaler::found_inf(const Optimizer& opt) const {
  const auto it = per_optimizer_.find(&opt);
  return it != per_optimizer_.end() && it->second.found_inf;
}

StateDict GradScaler::state_dict() const {
  auto f64 = [](double v) { return full({}, v, DType::Float64); };
  auto i64 = [](int64_t v) { return full({}, static_cast<double>(v), DType::Int64); };
  return {{"scale", f64(scale_)},
          {"growth_factor", f64(options_.growth_factor)},
          {"backoff_factor", f64(options_.backoff_factor)},
          {"growth_interval", i64(options_.growth_interval)},
          {"growth_tracker", i64(growth_tracker_)}};
}

void GradScaler::load_state_dict(const StateDict& state) {
  static const std::vector<Tensor> kNoParams;
  StateReader in(kOwner, state, kNoParams);
  GradScalerOptions o = options_;
  const double scale = in.value("scale");
  o.growth_factor = in.value("growth_factor");
  o.backoff_factor = in.value("backoff_factor");
  o.growth_interval = in.count("growth_interval");
  const int64_t tracker = in.count("growth_tracker");
  in.check_all_used();
  o.init_scale = scale;
  check_options(o);
  ADJOINT_CHECK(tracker >= 0 && tracker < o.growth_interval, Value, kOwner,
                "load_state_dict: 'growth_tracker' must be in [0, growth_interval): got ", tracker);
  options_ = o;
  scale_ = scale;
  growth_tracker_ = tracker;
  per_optimizer_.clear();
}

}  // namespace adjoint::optim
