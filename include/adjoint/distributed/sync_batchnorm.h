// nn::SyncBatchNorm: batch norm whose training statistics are those of the whole batch across the
// ranks of a process group, as torch.nn.SyncBatchNorm, for data-parallel training with small
// per-rank batches. Written with ops and the differentiable all_reduce (functional.h), so its
// backward all-reduces the two per-channel gradient sums, and it differentiates to any order.
// docs/distributed.md, "SyncBatchNorm", is the guide.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "adjoint/distributed/process_group.h"
#include "adjoint/nn/batchnorm.h"

namespace adjoint::nn {

/// Batch norm over [N, C, *] inputs (C = num_features; any rank >= 2) with BatchNorm's
/// parameters, buffers and momentum rules (BatchNormBase). In training mode each channel's mean
/// and biased variance are over every rank's batch: per channel, sum(x) is all-reduced for the
/// mean, then sum((x - mean)^2) for the variance (two passes, no cancellation), and the count.
/// The running estimates take the global mean and the global unbiased variance, so every rank
/// keeps the same ones. Every rank of `group` (null: dist::default_group()) must call forward,
/// and backward, in the same order. Ranks may hold different batch sizes, none at all included.
/// In evaluation mode it is BatchNorm: the running estimates, no communication.
class SyncBatchNorm : public BatchNormBase {
 public:
  explicit SyncBatchNorm(int64_t num_features, double eps = 1e-5,
                         std::optional<double> momentum = 0.1, bool affine = true,
                         bool track_running_stats = true, dist::ProcessGroup* group = nullptr);
  /// A SyncBatchNorm with from's configuration (num_features, eps, momentum, affine,
  /// track_running_stats) that holds from's parameters and buffers themselves, not copies (an
  /// optimizer or checkpoint holding them sees this module train), and from's training flag.
  SyncBatchNorm(const BatchNormBase& from, dist::ProcessGroup* group);
  Tensor forward(const Tensor& x) override;

 protected:
  void check_input_dim(const Tensor& x) const override;

 private:
  dist::ProcessGroup* group_;
};

/// torch.nn.SyncBatchNorm.convert_sync_batchnorm: every BatchNorm1d and BatchNorm2d in the
/// module tree (subclasses included) is replaced, through its parent's replace_module, by a
/// SyncBatchNorm(bn, group) that shares its parameter and buffer tensors, so state_dict() keeps
/// its keys and its tensors, and an optimizer made before the call still trains the model. A
/// batch norm reachable along two paths becomes one SyncBatchNorm. Returns `module` itself,
/// changed in place, or, when `module` is itself a batch norm, its SyncBatchNorm.
///
/// A typed member still holding a replaced batch norm (a block's std::shared_ptr<BatchNorm2d>
/// that its forward calls) keeps that object, which now forwards each call to its SyncBatchNorm
/// (BatchNormBase::forward_to): the model computes the same either way. The tree's train()/eval()
/// and hooks registered on the SyncBatchNorm apply; calls through the old object also fire the
/// hooks registered on it. Modules without batch norm are untouched.
std::shared_ptr<Module> convert_sync_batchnorm(const std::shared_ptr<Module>& module,
                                               dist::ProcessGroup* group = nullptr);

}  // namespace adjoint::nn
