// optim::Adam and optim::AdamW: torch.optim.Adam's single-tensor update, step by step in the
// same floating-point order as PyTorch's CPU kernels (lerp for m, addcmul for v, addcdiv for
// p), in place, with two shared scratch buffers and one temporary (sqrt(v)) per parameter.
#include "adjoint/optim/adam.h"

#include <cmath>

#include "adjoint/error.h"
#include "adjoint/ops.h"

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

void Adam::update(std::size_t index, Tensor& param, const Tensor& grad_in) {
  const AdamOptions& o = options_;
  const double lr = this->lr();
  ParamState& st = state_[index];
  if (!st.exp_avg.defined()) {
    st.exp_avg = zeros(param.shape(), param.dtype());
    st.exp_avg_sq = zeros(param.shape(), param.dtype());
  }
  st.step += 1;
  Tensor& m = st.exp_avg;
  Tensor& v = st.exp_avg_sq;

  Tensor grad = grad_in;
  if (o.weight_decay != 0) {
    if (decoupled_) {
      param.mul_(1 - lr * o.weight_decay);  // AdamW: decay the weights, not the gradient
    } else {
      Tensor g = scratch_like(param, 0);  // Adam: L2 term added to (a copy of) the gradient
      g.copy_(grad);
      g.add_(param, o.weight_decay);
      grad = g;
    }
  }

  Tensor t = scratch_like(param, 1);
  // m = lerp(m, grad, w), w = 1 - beta1, with torch's two-sided formula.
  const double w = 1 - o.beta1;
  t.copy_(grad);
  t.sub_(m);  // grad - m
  if (w < 0.5) {
    m.add_(t, w);  // m + w * (grad - m)
  } else {
    t.mul_(1 - w);  // grad - (grad - m) * (1 - w)
    m.copy_(grad);
    m.sub_(t);
  }
  // v = v * beta2 + (1 - beta2) * grad * grad  (addcmul multiplies left to right)
  v.mul_(o.beta2);
  t.copy_(grad);
  t.mul_(1 - o.beta2);
  t.mul_(grad);
  v.add_(t);

  const double step = static_cast<double>(st.step);
  const double bias_correction1 = 1 - std::pow(o.beta1, step);
  const double bias_correction2 = 1 - std::pow(o.beta2, step);
  const double step_size = lr / bias_correction1;
  // denom = sqrt(v) / sqrt(bias_correction2) + eps; a true division, as PyTorch (div_(Scalar)
  // would multiply by the reciprocal).
  Tensor denom = sqrt(v);
  denom.div_(scalar_tensor(std::sqrt(bias_correction2), param.dtype()));
  denom.add_(o.eps);
  // p = p + (-step_size) * m / denom  (addcdiv: value * t1 / t2)
  t.copy_(m);
  t.mul_(-step_size);
  t.div_(denom);
  param.add_(t);
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
