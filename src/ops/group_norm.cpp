// group_norm and instance_norm, composites. Group norm of x [N, C, *] is layer norm of each
// example's groups, x viewed as [N, G, C / G * S], followed by the per-channel affine: so its
// normalisation is the fused layer_norm op (kernel forward and input gradient, its statistics
// recomputed with ops when differentiated, its batching rule and Float32 autocast policy) and the
// affine two broadcasting ops. instance_norm is group norm with one group per channel, or batch
// norm in evaluation when it uses the running statistics.
#include <cstdint>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/normalization_ops.h"
#include "ops/batch_norm_update.h"
#include "ops/common.h"

namespace adjoint {
namespace {

// A [C] tensor as [1, C, 1, ...] for an input of `rank` dims (a view).
Tensor per_channel(const Tensor& t, int64_t rank) {
  Shape s(static_cast<std::size_t>(rank), 1);
  s[1] = t.numel();
  return t.reshape(s);
}

void check_affine(const Tensor& t, int64_t channels, const char* what, const Tensor& x,
                  const char* op) {
  if (!t.defined()) return;
  ADJOINT_CHECK(t.dim() == 1 && t.size(0) == channels, Shape, op, what, " must have shape [",
                channels, "] (the input's channels), got ", describe(t), " for input ",
                describe(x));
  ADJOINT_CHECK(is_floating(t.dtype()), DType, op, what, " must be floating, got ", describe(t));
}

int64_t spatial_size(const Tensor& x) {
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.size(d);
  return s;
}

}  // namespace

Tensor group_norm(const Tensor& x_in, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const char* op = "group_norm";
  ADJOINT_CHECK(x_in.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(x_in.dim() >= 2, Shape, op,
                "expected an input [N, C, *] of 2 or more dims (channels at dim 1), got ",
                describe(x_in));
  const int64_t channels = x_in.size(1);
  ADJOINT_CHECK(num_groups > 0 && channels % num_groups == 0, Value, op,
                "expected the input's channels to be divisible by num_groups, got ", describe(x_in),
                " and num_groups ", num_groups);
  check_affine(weight, channels, "weight", x_in, op);
  check_affine(bias, channels, "bias", x_in, op);
  ADJOINT_CHECK(eps >= 0, Value, op, "eps must be non-negative, got ", eps);
  const Tensor x = to_floating(x_in);
  const int64_t group_size = channels / num_groups * spatial_size(x);
  Tensor y = layer_norm(x.reshape({x.size(0), num_groups, group_size}), {group_size}, {}, {}, eps)
                 .reshape(x.shape());
  // y w + b per channel (in the wider dtype: a float32 weight is not rounded to bfloat16)
  if (weight.defined()) y = y * per_channel(weight, x.dim());
  if (bias.defined()) y = y + per_channel(bias, x.dim());
  return y;
}

Tensor instance_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var,
                     const Tensor& weight, const Tensor& bias, bool use_input_stats,
                     double momentum, double eps) {
  const char* op = "instance_norm";
  ADJOINT_CHECK(x_in.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(x_in.dim() >= 3, Shape, op,
                "expected an input [N, C, *] with at least one spatial dim, got ", describe(x_in));
  const int64_t channels = x_in.size(1);
  check_affine(weight, channels, "weight", x_in, op);
  check_affine(bias, channels, "bias", x_in, op);
  check_affine(running_mean, channels, "running_mean", x_in, op);
  check_affine(running_var, channels, "running_var", x_in, op);
  ADJOINT_CHECK(running_mean.defined() == running_var.defined(), Value, op,
                "running_mean and running_var must be given together, got ", describe(running_mean),
                " and ", describe(running_var));
  if (!use_input_stats) {
    ADJOINT_CHECK(running_mean.defined(), Value, op,
                  "use_input_stats is false, so running_mean and running_var are needed");
    return batch_norm(x_in, running_mean, running_var, weight, bias, false, momentum, eps);
  }
  const int64_t spatial = spatial_size(x_in);
  ADJOINT_CHECK(spatial != 1, Value, op,
                "expected more than 1 spatial element when training, got input ", describe(x_in));
  const Tensor y = group_norm(x_in, channels, weight, bias, eps);
  if (running_mean.defined() && x_in.numel() > 0) {
    // As PyTorch: the running statistics of the N C instances (mean, unbiased variance over
    // their spatial positions) updated with momentum, then averaged over the batch, which is
    // the average of the instance statistics taking the momentum step.
    const Tensor x = to_floating(x_in).detach();
    const int64_t n = x.size(0);
    const BatchNormStats s = batch_norm_stats(x.reshape({1, n * channels, spatial}));
    NoGradGuard no_grad;
    detail::update_running_statistic(
        running_mean, adjoint::mean(s.mean.reshape({n, channels}), {0}), momentum, op);
    detail::update_running_statistic(running_var, adjoint::mean(s.var.reshape({n, channels}), {0}),
                                     momentum, op);
  }
  return y;
}

}  // namespace adjoint
