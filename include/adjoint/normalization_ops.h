// Normalisation over channels, with PyTorch's semantics: batch_norm (batch statistics and a
// running-estimate update when training, the running estimates in evaluation), group_norm and
// instance_norm, for inputs [N, C, *] whose channel dim is 1. Each is differentiable to any
// order, batches under vmap and traces under compile (see docs/vision.md, "Normalization", for
// what the running-statistic update does under the transforms). layer_norm is in ops.h.
#pragma once

#include <cstdint>

#include "adjoint/tensor.h"

namespace adjoint {

/// Batch normalisation of x [N, C, *] (x.dim() >= 2; [N, C], [N, C, L], [N, C, H, W], ...) over
/// every dim but the channel dim 1, as torch.nn.functional.batch_norm:
///   y = (x - mean) / sqrt(var + eps) * weight + bias, weight and bias optional, [C].
/// With `training`, or without running statistics, mean and the biased var are the batch's; an
/// input with one value per channel (N * H * W = 1) is then an error, as in PyTorch. With
/// `training` and running statistics ([C] each, both or neither), those are updated in place,
/// under no gradient, as running = (1 - momentum) running + momentum batch_statistic, the
/// variance with Bessel's correction (unbiased); an empty input updates nothing. Without
/// `training`, the running statistics normalise. The update is a side effect, not a function of
/// the output: compile treats it as the in-place write it is (a graph break: the call runs
/// eagerly), and under vmap it needs running statistics batched like x (unbatched ones are an
/// error naming batch_norm, as in torch.func).
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = {}, const Tensor& bias = {}, bool training = false,
                  double momentum = 0.1, double eps = 1e-5);

/// Per-channel statistics of x [N, C, *] over every dim but 1, as a running estimate takes
/// them: the mean and the variance with Bessel's correction, [C] each (views of one [2, C]
/// result). Differentiable.
struct BatchNormStats {
  Tensor mean;
  Tensor var;
};
BatchNormStats batch_norm_stats(const Tensor& x);

/// Batch norm's input gradient given the batch mean and rstd = 1 / sqrt(biased var + eps), [C]
/// each: with x̂ = (x - mean) rstd and g = gy weight per channel, rstd (g - mean(g) - x̂ mean(g
/// x̂)), means per channel. One fused kernel, differentiable (the VJP of batch_norm uses it).
Tensor batch_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd);

/// Group normalisation of x [N, C, *] as torch.nn.functional.group_norm: the C channels are
/// split into num_groups groups of C / num_groups (which must divide C), each example's group
/// normalised over its channels and spatial positions (biased variance), then the per-channel
/// affine weight and bias ([C], optional).
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

/// Instance normalisation of x [N, C, *] (at least one spatial dim) as
/// torch.nn.functional.instance_norm: with `use_input_stats`, each (example, channel) is
/// normalised over its spatial positions (group_norm with C groups), and running statistics,
/// when given, are updated with momentum from the instance statistics averaged over the batch
/// (unbiased variance); one spatial element is then an error. Without it, the running
/// statistics (required) normalise, as batch_norm in evaluation.
Tensor instance_norm(const Tensor& x, const Tensor& running_mean = {},
                     const Tensor& running_var = {}, const Tensor& weight = {},
                     const Tensor& bias = {}, bool use_input_stats = true, double momentum = 0.1,
                     double eps = 1e-5);

}  // namespace adjoint
