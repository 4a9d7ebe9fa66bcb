// nn::BatchNorm1d, nn::BatchNorm2d and nn::GroupNorm, on adjoint::batch_norm and
// adjoint::group_norm (normalization_ops.h), with PyTorch's buffers, initialisation and
// train()/eval() behaviour. docs/vision.md, "Normalization", is the guide.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "adjoint/nn/module.h"

namespace adjoint::nn {

/// What BatchNorm1d and BatchNorm2d share (PyTorch's _BatchNorm). With `affine`, parameters
/// "weight" (ones) and "bias" (zeros) of shape [num_features]; with `track_running_stats`,
/// buffers "running_mean" (zeros), "running_var" (ones), both float32 [num_features], and
/// "num_batches_tracked" (int64, 0-d), saved and loaded with state_dict().
///
/// In training mode forward normalises with the batch's statistics and, when tracking, adds one
/// to num_batches_tracked and updates the running estimates with `momentum`, or with
/// 1 / num_batches_tracked (a cumulative average) when momentum is nullopt (PyTorch's None).
/// In evaluation mode it normalises with the running estimates, or with the batch's when not
/// tracking.
class BatchNormBase : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  /// running_mean to zeros, running_var to ones, num_batches_tracked to 0, in place.
  void reset_running_stats();

  int64_t num_features() const { return num_features_; }
  double eps() const { return eps_; }
  std::optional<double> momentum() const { return momentum_; }
  bool affine() const { return weight.defined(); }
  bool track_running_stats() const { return running_mean.defined(); }

  /// From now on forward(x) returns (*replacement)(x): how convert_sync_batchnorm
  /// (distributed/sync_batchnorm.h) reaches a typed member that still holds this module after
  /// the module tree got `replacement` in its place. The replacement shares this module's
  /// tensors; its training flag and hooks are the ones that count.
  void forward_to(std::shared_ptr<BatchNormBase> replacement);

  Tensor weight;               ///< undefined without affine
  Tensor bias;                 ///< undefined without affine
  Tensor running_mean;         ///< undefined without track_running_stats
  Tensor running_var;          ///< undefined without track_running_stats
  Tensor num_batches_tracked;  ///< undefined without track_running_stats

 protected:
  BatchNormBase(const char* type_name, int64_t num_features, double eps,
                std::optional<double> momentum, bool affine, bool track_running_stats);
  /// The configuration of `from` with its tensors themselves (the same handles, registered
  /// under the same names in the same order), not copies.
  BatchNormBase(const char* type_name, const BatchNormBase& from);
  /// Throws a Shape error naming the module unless x has a rank this module takes.
  virtual void check_input_dim(const Tensor& x) const = 0;
  std::string op_name() const { return "nn." + type_name(); }

 private:
  int64_t num_features_;
  double eps_;
  std::optional<double> momentum_;
  std::shared_ptr<BatchNormBase> forward_to_;  // see forward_to
};

/// Batch norm over [N, C] or [N, C, L] inputs (C = num_features), as torch.nn.BatchNorm1d.
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5,
                       std::optional<double> momentum = 0.1, bool affine = true,
                       bool track_running_stats = true);

 protected:
  void check_input_dim(const Tensor& x) const override;
};

/// Batch norm over [N, C, H, W] inputs (C = num_features), as torch.nn.BatchNorm2d.
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5,
                       std::optional<double> momentum = 0.1, bool affine = true,
                       bool track_running_stats = true);

 protected:
  void check_input_dim(const Tensor& x) const override;
};

/// Group norm of [N, C, *] inputs (C = num_channels, which num_groups must divide), as
/// torch.nn.GroupNorm: with `affine`, parameters "weight" (ones) and "bias" (zeros) of shape
/// [num_channels]. No buffers; the same in training and evaluation.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;

  int64_t num_groups() const { return num_groups_; }
  int64_t num_channels() const { return num_channels_; }
  double eps() const { return eps_; }

  Tensor weight;  ///< undefined without affine
  Tensor bias;    ///< undefined without affine

 private:
  int64_t num_groups_;
  int64_t num_channels_;
  double eps_;
};

}  // namespace adjoint::nn
