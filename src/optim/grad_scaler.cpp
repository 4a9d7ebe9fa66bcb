// GradScaler: torch.amp.GradScaler's state machine (scale, unscale_, step, update) over our
// optimizers. Per optimizer and iteration: Ready -> Unscaled (unscale_) -> Stepped (step);
// update() starts the next iteration.
#include "adjoint/optim/grad_scaler.h"

#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "core/op_tracer.h"

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

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), scale_(options.init_scale), alive_(std::make_shared<GradScaler*>(this)) {
  check_options(options_);
  set_scale(scale_);
}

GradScaler::GradScaler(const GradScaler& other)
    : options_(other.options_),
      scale_(other.scale_),
      growth_tracker_(other.growth_tracker_),
      per_optimizer_(other.per_optimizer_),
      alive_(std::make_shared<GradScaler*>(this)) {
  set_scale(scale_);
}

GradScaler& GradScaler::operator=(const GradScaler& other) {
  if (this == &other) return *this;
  options_ = other.options_;
  growth_tracker_ = other.growth_tracker_;
  per_optimizer_ = other.per_optimizer_;
  set_scale(other.scale_);
  return *this;
}

void GradScaler::set_scale(double scale) {
  NoGradGuard no_grad;
  scale_ = scale;
  if (!scale_tensor_.defined()) {
    scale_tensor_ = full({}, scale, DType::Float32);
    inv_scale_tensor_ = full({}, 1.0 / scale, DType::Float64);
  } else {
    scale_tensor_.fill_(scale);
    inv_scale_tensor_.fill_(1.0 / scale);
  }
}

Tensor GradScaler::scale(const Tensor& loss) const {
  ADJOINT_CHECK(loss.defined() && is_floating(loss.dtype()), DType, kOwner,
                "scale expects a floating-point loss, got ",
                loss.defined() ? describe(loss) : std::string("an undefined tensor"));
  if (!options_.enabled) return loss;
  // As PyTorch, whose scale is a 0-d float32 tensor: a 0-d float16 loss is scaled in float32
  // (5 * 2^16 is past float16's 65504), and the gradient is cast back at the loss. A tensor,
  // so that a compiled function reads the scale update() left, at every call.
  if (loss.dim() == 0 && is_reduced_float(loss.dtype()))
    return loss.to(DType::Float32) * scale_tensor_;
  return loss * scale_tensor_;
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!options_.enabled) return;
  ::adjoint::detail::check_traceable(
      "GradScaler.unscale_",
      "its Inf/NaN check is read into C++ (call step(), which unscales inside the compiled "
      "function)");
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
  if (::adjoint::detail::tracing_writes()) [[unlikely]] {
    record_traced_step(opt);
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

// Note [GradScaler under compile]
// Inside a compiled function (Note [Training steps under compile] in src/compile/trace.cpp)
// step(opt) traces the unscaling as ops, g * (1 / scale) with the reciprocal a 0-d float64
// tensor (the same rounding as eager mul_ by a double), and the Inf/NaN check as a 0-d bool
// (max |g| minus itself is 0 exactly when it is finite, as has_non_finite reads it); the
// unscaled gradients become the .grad the function sees and leaves. What reads the check into
// C++ is an effect that each replay runs: it records found_inf for this optimizer and steps it
// unless set. update() is an effect too, reading what that replay's step recorded and setting
// the scale's tensors in place, which the next replay's scale() reads. Nothing of the
// scaler's C++ state changes while tracing, so its checks (step twice, update with no step)
// run at each replay, where the eager calls would run them. The scaler and the optimizer must
// outlive the compiled function.
void GradScaler::record_traced_step(Optimizer& opt) {
  NoGradGuard no_grad;
  std::vector<Tensor> unscaled;
  std::vector<std::size_t> which;
  Tensor found;
  const std::vector<Tensor>& params = opt.params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].grad();
    if (!g.defined()) continue;
    if (g.numel() != 0) {
      const Tensor m = g.abs().max().to(DType::Float64);
      const Tensor bad = ne(m - m, 0.0);
      found = found.defined() ? logical_or(found, bad) : bad;
    }
    Tensor u = g * inv_scale_tensor_;
    params[i].set_grad(u);
    unscaled.push_back(u);
    which.push_back(i);
  }
  if (!found.defined()) found = zeros({}, DType::Bool);
  std::vector<Tensor> inputs{found};
  inputs.insert(inputs.end(), unscaled.begin(), unscaled.end());
  std::weak_ptr<GradScaler*> scaler = alive_;
  std::weak_ptr<Optimizer*> optimizer = opt.alive_;
  ::adjoint::detail::tls_op_tracer->record_effect(
      "GradScaler.step", inputs, params, [scaler, optimizer, which](std::span<const Tensor> in) {
        const std::shared_ptr<GradScaler*> s = scaler.lock();
        const std::shared_ptr<Optimizer*> o = optimizer.lock();
        ADJOINT_CHECK(s && o, Value, kOwner,
                      "step: the scaler or its optimizer was destroyed, and a compiled function "
                      "that steps them was called afterwards");
        GradScaler& self = **s;
        Optimizer& opt = **o;
        PerOptimizer& state = self.per_optimizer_[&opt];
        ADJOINT_CHECK(state.stage == Stage::Ready, Value, kOwner,
                      "step() has already been called since the last update()");
        bool found_inf = in[0].item<bool>();
        if (self.options_.combine_found_inf) found_inf = self.options_.combine_found_inf(found_inf);
        state.found_inf = found_inf;
        state.stage = Stage::Stepped;
        if (found_inf) return Tensor();
        std::vector<Tensor> grads(opt.params().size());
        for (std::size_t k = 0; k < which.size(); ++k) grads[which[k]] = in[k + 1];
        opt.step_with(grads);
        return Tensor();
      });
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  if (::adjoint::detail::tracing_writes()) [[unlikely]] {
    std::weak_ptr<GradScaler*> scaler = alive_;
    ::adjoint::detail::tls_op_tracer->record_effect(
        "GradScaler.update", {}, std::vector<Tensor>{scale_tensor_, inv_scale_tensor_},
        [scaler, new_scale](std::span<const Tensor>) {
          const std::shared_ptr<GradScaler*> s = scaler.lock();
          ADJOINT_CHECK(s != nullptr, Value, kOwner,
                        "update: the scaler was destroyed, and a compiled function that "
                        "updates it was called afterwards");
          (*s)->update_now(new_scale);
          return Tensor();
        });
    return;
  }
  update_now(new_scale);
}

void GradScaler::update_now(std::optional<double> new_scale) {
  if (new_scale) {
    ADJOINT_CHECK(std::isfinite(*new_scale) && *new_scale > 0, Value, kOwner,
                  "update: new_scale must be finite and > 0: got ", *new_scale);
    set_scale(*new_scale);
  } else {
    ADJOINT_CHECK(
        !per_optimizer_.empty(), Value, kOwner,
        "update: no unscale_() or step() since the last update(); nothing to update from");
    bool found = false;
    for (const auto& [opt, state] : per_optimizer_) found = found || state.found_inf;
    if (found) {
      set_scale(scale_ * options_.backoff_factor);
      growth_tracker_ = 0;
    } else if (++growth_tracker_ == options_.growth_interval) {
      // As PyTorch: a growth that would overflow to Inf keeps the old scale.
      if (const double grown = scale_ * options_.growth_factor; std::isfinite(grown))
        set_scale(grown);
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
  set_scale(scale);
  growth_tracker_ = tracker;
  per_optimizer_.clear();
}

}  // namespace adjoint::optim
