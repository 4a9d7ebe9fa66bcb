// optim::Adam and optim::AdamW: Adam with bias correction and torch.optim.Adam's exact update;
// Adam adds L2 weight decay to the gradient, AdamW decays the weights directly (decoupled).
#pragma once

#include <cstdint>
#include <vector>

#include "adjoint/optim/optimizer.h"

namespace adjoint::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  /// Adam: L2 penalty added to the gradient. AdamW: decoupled decay p *= 1 - lr * weight_decay.
  double weight_decay = 0;
};

/// torch.optim.Adam. With g the gradient of p and t the parameter's own step count (it counts
/// only the steps where p had a gradient, as PyTorch):
///   g = g + weight_decay * p                         (Adam only)
///   p = p * (1 - lr * weight_decay)                  (AdamW only)
///   m = beta1 * m + (1 - beta1) * g                  (computed as torch's lerp)
///   v = beta2 * v + (1 - beta2) * g * g
///   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
///   p = p - lr / (1 - beta1^t) * m / denom
/// State: "state.<i>.step" (int64), "state.<i>.exp_avg", "state.<i>.exp_avg_sq".
/// Hyper-parameters: lr, beta1, beta2, eps, weight_decay (float64), decoupled_weight_decay
/// (bool, tells Adam and AdamW state dicts apart).
class Adam : public Optimizer {
 public:
  /// Throws adjoint::Error naming "optim.Adam" for a negative lr, eps or weight_decay, or a
  /// beta outside [0, 1).
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  /// The options in use, lr included (the current lr()).
  AdamOptions options() const {
    AdamOptions o = options_;
    o.lr = lr();
    return o;
  }
  bool decoupled_weight_decay() const { return decoupled_; }

 protected:
  Adam(std::string name, std::vector<Tensor> params, AdamOptions options, bool decoupled);
  void update(std::size_t index, Tensor& param, const Tensor& grad) override;
  void save_state(StateDict& out) const override;
  std::function<void()> load_state(StateReader& in) override;

 private:
  struct ParamState {
    int64_t step = 0;
    Tensor exp_avg;     // m
    Tensor exp_avg_sq;  // v
  };
  void validate(const AdamOptions& o) const;

  AdamOptions options_;  // options_.lr is stale: the lr lives in the base class
  bool decoupled_;
  std::vector<ParamState> state_;
};

/// AdamOptions with torch.optim.AdamW's defaults (weight_decay 0.01).
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

/// torch.optim.AdamW: Adam with decoupled weight decay (p *= 1 - lr * weight_decay before the
/// Adam update).
class AdamW : public Adam {
 public:
  /// Throws adjoint::Error naming "optim.AdamW" for the same bad values as Adam.
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
};

}  // namespace adjoint::optim
