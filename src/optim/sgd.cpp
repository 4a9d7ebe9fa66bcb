// optim::SGD: torch.optim.SGD's update (momentum, dampening, Nesterov, L2 weight decay), done
// in place with the shared scratch buffer, and its state-dict entries.
#include "adjoint/optim/sgd.h"

#include <cmath>

#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "autograd/apply.h"

namespace adjoint::optim {

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer("optim.SGD", std::move(params), options.lr), options_(options) {
  validate(options_);
  momentum_buf_.resize(this->params().size());
}

void SGD::validate(const SGDOptions& o) const {
  check(std::isfinite(o.momentum) && o.momentum >= 0, "momentum must be finite and >= 0",
        o.momentum);
  check(std::isfinite(o.dampening), "dampening must be finite", o.dampening);
  check(std::isfinite(o.weight_decay) && o.weight_decay >= 0,
        "weight_decay must be finite and >= 0", o.weight_decay);
  ADJOINT_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), Value, name(),
                "nesterov momentum requires momentum > 0 and dampening == 0: got momentum ",
                o.momentum, ", dampening ", o.dampening);
}

void SGD::update(std::size_t index, Tensor& param, const Tensor& grad) {
  const SGDOptions& o = options_;
  // d is the direction; it is the caller's .grad until something has to be added to it, then
  // a scratch copy (the .grad itself is never modified, as in PyTorch).
  Tensor d = grad;
  bool d_is_scratch = false;
  auto own_d = [&] {
    if (d_is_scratch) return;
    Tensor s = scratch_like(param);
    s.copy_(d);
    d = s;
    d_is_scratch = true;
  };
  if (o.weight_decay != 0) {
    own_d();
    d.add_(param, o.weight_decay);  // g + wd * p
  }
  if (o.momentum != 0) {
    Tensor& buf = momentum_buf_[index];
    if (!buf.defined()) {
      buf = detail::detach_alias(d).clone();  // first step: the buffer is the gradient itself
    } else {
      buf.mul_(o.momentum);
      buf.add_(d, 1 - o.dampening);
    }
    if (o.nesterov) {
      own_d();
      d.add_(buf, o.momentum);  // g + momentum * b
    } else {
      d = buf;
    }
  }
  param.add_(d, -lr());
}

void SGD::save_state(StateDict& out) const {
  out.emplace_back("hparams.momentum", scalar_tensor(options_.momentum, DType::Float64));
  out.emplace_back("hparams.dampening", scalar_tensor(options_.dampening, DType::Float64));
  out.emplace_back("hparams.weight_decay", scalar_tensor(options_.weight_decay, DType::Float64));
  out.emplace_back("hparams.nesterov", scalar_tensor(options_.nesterov, DType::Bool));
  for (std::size_t i = 0; i < momentum_buf_.size(); ++i)
    if (momentum_buf_[i].defined())
      out.emplace_back("state." + std::to_string(i) + ".momentum_buffer", momentum_buf_[i].clone());
}

std::function<void()> SGD::load_state(StateReader& in) {
  SGDOptions o;
  o.momentum = in.hparam("momentum");
  o.dampening = in.hparam("dampening");
  o.weight_decay = in.hparam("weight_decay");
  o.nesterov = in.hparam_flag("nesterov");
  validate(o);
  std::vector<Tensor> bufs(params().size());
  for (std::size_t i = 0; i < bufs.size(); ++i) bufs[i] = in.param_state(i, "momentum_buffer");
  return [this, o, bufs = std::move(bufs)]() mutable {
    options_ = o;
    momentum_buf_ = std::move(bufs);
  };
}

}  // namespace adjoint::optim
