// --data-parallel for mlp and gpt-tiny: the workload's training step on every rank of an
// `mpirun -np N` job, each rank with its 1/N slice of the batch and the gradients averaged by
// DistributedDataParallel while backward runs. Rank 0 reports the step time with the time
// the all-reduces took on the communication thread, the part of it backward did not hide,
// and the overlap. Without mpirun it is one rank (world size 1, nothing to communicate).
#pragma once

#include <memory>
#include <optional>

#include "adjoint/adjoint.h"
#include "adjoint/distributed.h"
#include "report.h"

namespace bench {

class DataParallelMode {
 public:
  /// Off unless --data-parallel: then DDP over `params` (or the module) on the default group.
  template <class Model>
  DataParallelMode(const Opts& o, Model& model) {
    if (!o.data_parallel) return;
    adjoint::dist::ProcessGroup& pg = adjoint::dist::default_group();
    rank_ = pg.rank();
    world_ = pg.world_size();
    ddp_ = std::make_unique<adjoint::dist::DistributedDataParallel>(model);
  }
  /// This rank's rows of a batch (dim 0), contiguous; the whole batch when off.
  adjoint::Tensor rows(const adjoint::Tensor& batch) const {
    if (!ddp_) return batch.contiguous();
    const int64_t n = batch.shape()[0] / world_;
    return batch.narrow(0, rank_ * n, n).contiguous();
  }
  /// After a timed step: what the last backward's all-reduces cost.
  void record() {
    if (!ddp_) return;
    comm_.add(ddp_->last_stats().comm_ms);
    exposed_.add(ddp_->last_stats().exposed_ms);
    overlap_.add(ddp_->last_stats().overlap());
  }
  void report(Json& j) const {
    if (!ddp_) return;
    j.integer("ranks", world_);
    j.integer("buckets", ddp_->last_stats().buckets);
    j.num("comm_ms", comm_.median());
    j.num("exposed_comm_ms", exposed_.median());
    j.num("overlap", overlap_.median());
  }

 private:
  std::unique_ptr<adjoint::dist::DistributedDataParallel> ddp_;
  int rank_ = 0, world_ = 1;
  Samples comm_, exposed_, overlap_;
};

}  // namespace bench
