// nn::BatchNorm1d/2d and nn::GroupNorm: PyTorch's initialisation and buffers, the momentum
// choice of _BatchNorm.forward (a cumulative average for momentum None), and forwards on the
// batch_norm and group_norm ops that name the module when the input's rank or channels are wrong.
#include "adjoint/nn/batchnorm.h"

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/normalization_ops.h"
#include "adjoint/ops.h"

namespace adjoint::nn {

BatchNormBase::BatchNormBase(const char* type_name, int64_t num_features, double eps,
                             std::optional<double> momentum, bool affine, bool track_running_stats)
    : Module(type_name), num_features_(num_features), eps_(eps), momentum_(momentum) {
  const std::string op = op_name();
  ADJOINT_CHECK(num_features > 0, Value, op, "num_features must be positive, got ", num_features);
  ADJOINT_CHECK(eps >= 0, Value, op, "eps must be non-negative, got ", eps);
  ADJOINT_CHECK(!momentum || (*momentum >= 0 && *momentum <= 1), Value, op,
                "momentum must be in [0, 1] or None, got ", *momentum);
  if (affine) {
    weight = register_parameter("weight", ones({num_features}));
    bias = register_parameter("bias", zeros({num_features}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", zeros({num_features}));
    running_var = register_buffer("running_var", ones({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::Int64));
  }
}

BatchNormBase::BatchNormBase(const char* type_name, const BatchNormBase& from)
    : Module(type_name),
      num_features_(from.num_features_),
      eps_(from.eps_),
      momentum_(from.momentum_) {
  if (from.affine()) {
    weight = register_parameter("weight", from.weight, from.weight.requires_grad());
    bias = register_parameter("bias", from.bias, from.bias.requires_grad());
  }
  if (from.track_running_stats()) {
    running_mean = register_buffer("running_mean", from.running_mean);
    running_var = register_buffer("running_var", from.running_var);
    num_batches_tracked = register_buffer("num_batches_tracked", from.num_batches_tracked);
  }
}

void BatchNormBase::forward_to(std::shared_ptr<BatchNormBase> replacement) {
  ADJOINT_CHECK(replacement != nullptr && replacement.get() != this, Value, op_name(),
                "forward_to needs another module");
  forward_to_ = std::move(replacement);
}

void BatchNormBase::reset_running_stats() {
  if (!track_running_stats()) return;
  NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

Tensor BatchNormBase::forward(const Tensor& x) {
  if (forward_to_) return (*forward_to_)(x);
  const std::string op = op_name();
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined input");
  check_input_dim(x);
  ADJOINT_CHECK(x.size(1) == num_features_, Shape, op, "expected ", num_features_,
                " channels at dim 1, got input ", describe(x));
  double factor = momentum_.value_or(0.0);
  if (is_training() && track_running_stats()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1);
    // momentum None: running = the average of every batch's statistic so far
    if (!momentum_) factor = 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
  }
  // Evaluation without running estimates normalises with the batch's statistics too.
  return batch_norm(x, running_mean, running_var, weight, bias, is_training(), factor, eps_);
}

BatchNorm1d::BatchNorm1d(int64_t num_features, double eps, std::optional<double> momentum,
                         bool affine, bool track_running_stats)
    : BatchNormBase("BatchNorm1d", num_features, eps, momentum, affine, track_running_stats) {}

void BatchNorm1d::check_input_dim(const Tensor& x) const {
  ADJOINT_CHECK(x.dim() == 2 || x.dim() == 3, Shape, op_name(), "expected 2D or 3D input (got ",
                x.dim(), "D input ", describe(x), ")");
}

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, std::optional<double> momentum,
                         bool affine, bool track_running_stats)
    : BatchNormBase("BatchNorm2d", num_features, eps, momentum, affine, track_running_stats) {}

void BatchNorm2d::check_input_dim(const Tensor& x) const {
  ADJOINT_CHECK(x.dim() == 4, Shape, op_name(), "expected 4D input (got ", x.dim(), "D input ",
                describe(x), ")");
}

GroupNorm::GroupNorm(int64_t num_groups, int64_t num_channels, double eps, bool affine)
    : Module("GroupNorm"), num_groups_(num_groups), num_channels_(num_channels), eps_(eps) {
  const char* op = "nn.GroupNorm";
  ADJOINT_CHECK(num_groups > 0 && num_channels > 0 && num_channels % num_groups == 0, Value, op,
                "num_channels must be positive and divisible by num_groups, got num_channels ",
                num_channels, " and num_groups ", num_groups);
  ADJOINT_CHECK(eps >= 0, Value, op, "eps must be non-negative, got ", eps);
  if (affine) {
    weight = register_parameter("weight", ones({num_channels}));
    bias = register_parameter("bias", zeros({num_channels}));
  }
}

Tensor GroupNorm::forward(const Tensor& x) {
  const char* op = "nn.GroupNorm";
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(x.dim() >= 2 && x.size(1) == num_channels_, Shape, op, "expected an input [N, ",
                num_channels_, ", *], got ", describe(x));
  return group_norm(x, num_groups_, weight, bias, eps_);
}

}  // namespace adjoint::nn
