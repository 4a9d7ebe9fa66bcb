// optim::Adam and optim::AdamW: options, per-parameter state and its state dict. The update
// itself (torch.optim.Adam's single-tensor update in PyTorch's floating-point order, fused into
// one pass where the tensors allow) is in adam_fused.cpp.
#include "adjoint/optim/adam.h"

#include <cmath>

#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "optim/adam_fused.h"

namespace adjoint::optim {

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam("optim.Adam", std::move(params), options, false) {}

Adam::Adam(std::string name, std::vector<Tensor> params, AdamOptions options, bool decoupled)
    : Optimizer(std::move(name), std::move(params), options.lr),
      options_(options),
      decoupled_(decoupled) {
  validate(options_);
  state_.resize(this->params().size());
}

namespace {
AdamOptions to_adam(const AdamWOptions& o) {
  return {
      .lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay};
}
}  // namespace

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam("optim.AdamW", std::move(params), to_adam(options), true) {}

void Adam::validate(const AdamOptions& o) const {
  auto in_unit = [](double b) { return b >= 0 && b < 1; };  // false for NaN
  ADJOINT_CHECK(in_unit(o.beta1) && in_unit(o.beta2), Value, name(),
                "betas must be in [0, 1): got (", o.beta1, ", ", o.beta2, ")");
  check(std::isfinite(o.eps) && o.eps >= 0, "eps must be finite and >= 0", o.eps);
  check(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
        "weight_decay must be finite and >= 0", o.weight_decay);
}

void Adam::update(std::size_t index, Tensor& param, const Tensor& grad) {
  const AdamOptions& o = options_;
  ParamState& st = state_[index];
  if (!st.exp_avg.defined()) {
    st.exp_avg = zeros_like(param);  // on the parameter's device, as PyTorch's state
    st.exp_avg_sq = zeros_like(param);
  }
  st.step += 1;
  const detail::AdamStep s{.lr = lr(),
                           .beta1 = o.beta1,
                           .beta2 = o.beta2,
                           .eps = o.eps,
                           .weight_decay = o.weight_decay,
                           .decoupled = decoupled_,
                           .step = st.step};
  // One fused pass where the tensors allow it, else the in-place ops; bitwise the same result
  // (see Note [Fused Adam is bitwise the op-by-op update] in adam_fused.cpp).
  detail::adam_update(param, grad, st.exp_avg, st.exp_avg_sq, s,
                      [this](const Tensor& like, int slot) { return scratch_like(like, slot); });
}

void Adam::save_state(StateDict& out) const {
  out.emplace_back("hparams.beta1", scalar_tensor(options_.beta1, DType::Float64));
  out.emplace_back("hparams.beta2", scalar_tensor(options_.beta2, DType::Float64));
  out.emplace_back("hparams.eps", scalar_tensor(options_.eps, DType::Float64));
  out.emplace_back("hparams.weight_decay", scalar_tensor(options_.weight_decay, DType::Float64));
  out.emplace_back("hparams.decoupled_weight_decay", scalar_tensor(decoupled_, DType::Bool));
  for (std::size_t i = 0; i < state_.size(); ++i) {
    const ParamState& st = state_[i];
    if (st.step == 0) continue;
    const std::string prefix = "state." + std::to_string(i) + ".";
    out.emplace_back(prefix + "step", scalar_tensor(st.step, DType::Int64));
    out.emplace_back(prefix + "exp_avg", st.exp_avg.clone());
    out.emplace_back(prefix + "exp_avg_sq", st.exp_avg_sq.clone());
  }
}

std::function<void()> Adam::load_state(StateReader& in) {
  AdamOptions o;
  o.beta1 = in.hparam("beta1");
  o.beta2 = in.hparam("beta2");
  o.eps = in.hparam("eps");
  o.weight_decay = in.hparam("weight_decay");
  const bool decoupled = in.hparam_flag("decoupled_weight_decay");
  ADJOINT_CHECK(decoupled == decoupled_, Value, name(),
                "load_state_dict: the state dict is from optim.", decoupled ? "AdamW" : "Adam",
                " (decoupled_weight_decay ", decoupled ? "true" : "false", "), this is ", name());
  validate(o);
  std::vector<ParamState> state(params().size());
  for (std::size_t i = 0; i < state.size(); ++i) {
    std::optional<int64_t> step = in.param_count(i, "step");
    if (!step) continue;  // never updated: exp_avg / exp_avg_sq would be reported as unexpected
    const std::string prefix = "state." + std::to_string(i) + ".";
    ADJOINT_CHECK(*step >= 1, Value, name(), "load_state_dict: '", prefix,
                  "step' must be >= 1: got ", *step);
    state[i].step = *step;
    state[i].exp_avg = in.param_state(i, "exp_avg");
    state[i].exp_avg_sq = in.param_state(i, "exp_avg_sq");
    ADJOINT_CHECK(state[i].exp_avg.defined() && state[i].exp_avg_sq.defined(), Value, name(),
                  "load_state_dict: '", prefix, "step' is given but '", prefix, "exp_avg' or '",
                  prefix, "exp_avg_sq' is missing");
  }
  return [this, o, state = std::move(state)]() mutable {
    const double lr = options_.lr;
    options_ = o;
    options_.lr = lr;
    state_ = std::move(state);
  };
}

}  // namespace adjoint::optim
