// nn::SyncBatchNorm: batch norm whose training statistics are those of the whole batch across the
// ranks of a process group, as torch.nn.SyncBatchNorm, for data-parallel training with small
// per-rank batches. Written with ops and the differentiable all_reduce (functional.h), so its
// backward all-reduces the two per-channel gradient sums, and it differentiates to any order.
// docs/distributed.md, "SyncBatchNorm", is the guide.
#pragma once

#include <cstdint>
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
  Tensor forward(const Tensor& x) override;

 protected:
  void check_input_dim(const Tensor& x) const override;

 private:
  dist::ProcessGroup* group_;
};

}  // namespace adjoint::nn
