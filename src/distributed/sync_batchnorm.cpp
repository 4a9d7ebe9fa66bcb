// nn::SyncBatchNorm: the global batch statistics from two differentiable all-reduces of
// per-channel sums, the normalisation with ops, and the running estimates from the same global
// statistics (see adjoint/distributed/sync_batchnorm.h).
#include "adjoint/distributed/sync_batchnorm.h"

#include <map>
#include <vector>

#include "adjoint/distributed/functional.h"
#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/normalization_ops.h"
#include "adjoint/ops.h"
#include "ops/batch_norm_util.h"

namespace adjoint::nn {

SyncBatchNorm::SyncBatchNorm(int64_t num_features, double eps, std::optional<double> momentum,
                             bool affine, bool track_running_stats, dist::ProcessGroup* group)
    : BatchNormBase("SyncBatchNorm", num_features, eps, momentum, affine, track_running_stats),
      group_(group) {}

SyncBatchNorm::SyncBatchNorm(const BatchNormBase& from, dist::ProcessGroup* group)
    : BatchNormBase("SyncBatchNorm", from), group_(group) {
  train(from.is_training());
}

void SyncBatchNorm::check_input_dim(const Tensor& x) const {
  ADJOINT_CHECK(x.dim() >= 2, Shape, op_name(), "expected at least 2D input (got ", x.dim(),
                "D input ", describe(x), ")");
}

Tensor SyncBatchNorm::forward(const Tensor& x) {
  const std::string op = op_name();
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined input");
  check_input_dim(x);
  ADJOINT_CHECK(x.size(1) == num_features(), Shape, op, "expected ", num_features(),
                " channels at dim 1, got input ", describe(x));
  ADJOINT_CHECK(is_floating(x.dtype()), DType, op, "expected a floating input, got ", describe(x));
  // Evaluation with running estimates needs no communication; without them it normalises with
  // the (global) batch statistics, as BatchNorm does with its batch's.
  if (!is_training() && track_running_stats())
    return batch_norm(x, running_mean, running_var, weight, bias, false, 0.0, eps());
  dist::ProcessGroup* group = group_ ? group_ : &dist::default_group();

  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Shape bc(std::vector<int64_t>(static_cast<std::size_t>(x.dim()), 1));
  bc[1] = num_features();
  // The number of values per channel over all ranks (exact in float64 up to 2^53).
  Tensor count = full({}, static_cast<double>(x.numel() / num_features()), DType::Float64);
  group->all_reduce(count);
  const double n = count.item<double>();
  ADJOINT_CHECK(n > 1 || !is_training(), Value, op,
                "expected more than 1 value per channel over all ranks when training, got ", n,
                " (input ", describe(x), " on this rank)");
  // mean = Σ_ranks Σ x / n, var = Σ_ranks Σ (x - mean)² / n: d/dx flows through both
  // all-reduces, whose VJPs all-reduce the cotangents of the two sums.
  const Tensor mean = dist::all_reduce(sum(x, dims), dist::ReduceOp::Sum, group) / n;
  const Tensor centred = x - mean.reshape(bc);
  const Tensor var = dist::all_reduce(sum(centred.square(), dims), dist::ReduceOp::Sum, group) / n;
  Tensor y = centred * rsqrt(var + eps()).reshape(bc);
  if (weight.defined()) y = y * weight.reshape(bc);
  if (bias.defined()) y = y + bias.reshape(bc);

  if (is_training() && track_running_stats()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1);
    // momentum None: running = the average of every batch's statistic so far
    const double factor =
        momentum() ? *momentum() : 1.0 / static_cast<double>(num_batches_tracked.item<int64_t>());
    detail::update_running_statistic(running_mean, mean.detach().to(running_mean.dtype()), factor,
                                     op.c_str());
    detail::update_running_statistic(
        running_var, (var.detach() * (n / (n - 1))).to(running_var.dtype()), factor, op.c_str());
  }
  return y;
}

namespace {

// The SyncBatchNorm for a batch norm to convert, or null for any other module; one per module
// however many parents list it.
using Converted = std::map<const Module*, std::shared_ptr<SyncBatchNorm>>;
std::shared_ptr<SyncBatchNorm> sync_for(const std::shared_ptr<Module>& m, dist::ProcessGroup* group,
                                        Converted& done) {
  auto* bn = dynamic_cast<BatchNormBase*>(m.get());
  if (bn == nullptr ||
      (dynamic_cast<BatchNorm1d*>(bn) == nullptr && dynamic_cast<BatchNorm2d*>(bn) == nullptr))
    return nullptr;
  auto it = done.find(m.get());
  if (it != done.end()) return it->second;
  auto sync = std::make_shared<SyncBatchNorm>(*bn, group);
  bn->forward_to(sync);  // for typed members that keep the old module
  done.emplace(m.get(), sync);
  return sync;
}

void convert_children(Module& parent, dist::ProcessGroup* group, Converted& done) {
  for (const auto& [name, child] : parent.named_children()) {
    if (auto sync = sync_for(child, group, done))
      parent.replace_module(name, sync);
    else
      convert_children(*child, group, done);
  }
}

}  // namespace

std::shared_ptr<Module> convert_sync_batchnorm(const std::shared_ptr<Module>& module,
                                               dist::ProcessGroup* group) {
  ADJOINT_CHECK(module != nullptr, Value, "convert_sync_batchnorm", "got a null module");
  Converted done;
  if (auto sync = sync_for(module, group, done)) return sync;
  convert_children(*module, group, done);
  return module;
}

}  // namespace adjoint::nn
