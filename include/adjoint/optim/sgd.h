// optim::SGD: stochastic gradient descent with momentum, dampening, Nesterov momentum and L2
// weight decay, with torch.optim.SGD's exact update rule.
#pragma once

#include <vector>

#include "adjoint/optim/optimizer.h"

namespace adjoint::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  bool nesterov = false;
  /// L2 penalty: weight_decay * p is added to the gradient.
  double weight_decay = 0;
};

/// torch.optim.SGD. With g the gradient of parameter p:
///   g = g + weight_decay * p
///   if momentum != 0:
///     b = g on the first step, else b = momentum * b + (1 - dampening) * g
///     g = nesterov ? g + momentum * b : b
///   p = p - lr * g
/// State: "state.<i>.momentum_buffer" (when momentum != 0). Hyper-parameters: lr, momentum,
/// dampening, weight_decay (float64) and nesterov (bool).
class SGD : public Optimizer {
 public:
  /// Throws adjoint::Error naming "optim.SGD" for a negative lr, momentum or weight_decay, and
  /// for nesterov without momentum > 0 and dampening == 0.
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  /// The options in use, lr included (the current lr()).
  SGDOptions options() const {
    SGDOptions o = options_;
    o.lr = lr();
    return o;
  }

 protected:
  void update(std::size_t index, Tensor& param, const Tensor& grad) override;
  void save_state(StateDict& out) const override;
  std::function<void()> load_state(StateReader& in) override;

 private:
  void validate(const SGDOptions& o) const;

  SGDOptions options_;                // options_.lr is stale: the lr lives in the base class
  std::vector<Tensor> momentum_buf_;  // per parameter; undefined until its first update
};

}  // namespace adjoint::optim
