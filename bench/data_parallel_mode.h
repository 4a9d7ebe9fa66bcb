// --data-parallel for mlp and gpt-tiny: the workload's training step on every rank of an
// `mpirun -np N` job, each rank with its 1/N slice of the batch and the gradients averaged by
// DistributedDataParallel while backward runs (--zero 1|2, gpt-tiny only: ZeRO's sharded
// AdamW). Rank 0 reports the step time with the time the collectives took on the
// communication thread, the part of it backward did not hide, the overlap, and this rank's
// bytes of parameters, gradients and optimizer state. Without mpirun it is one rank (world
// size 1, nothing to communicate).
#pragma once

#include <memory>
#include <optional>

#include "adjoint/adjoint.h"
#include "adjoint/distributed.h"
#include "adjoint/optim.h"
#include "report.h"

namespace bench {

class DataParallelMode {
 public:
  /// Off unless --data-parallel: then DDP over `model` (a module or a parameter list) on the
  /// default group, and with --zero a ZeroOptimizer whose shards get AdamW(`adamw`).
  template <class Model>
  DataParallelMode(const Opts& o, Model& model, adjoint::optim::AdamWOptions adamw = {}) {
    if (!o.data_parallel) return;
    adjoint::dist::ProcessGroup& pg = adjoint::dist::default_group();
    rank_ = pg.rank();
    world_ = pg.world_size();
    ddp_ = std::make_unique<adjoint::dist::DistributedDataParallel>(
        model, adjoint::dist::DdpOptions{.bucket_bytes = int64_t{o.bucket_mb} << 20,
                                         .zero_stage = o.zero,
                                         .gradient_as_bucket_view = o.grad_bucket_view});
    if (o.zero > 0)
      zero_ = std::make_unique<adjoint::dist::ZeroOptimizer>(
          *ddp_, [adamw](const std::vector<adjoint::Tensor>& shard) {
            return std::make_unique<adjoint::optim::AdamW>(shard, adamw);
          });
  }
  /// This rank's rows of a batch (dim 0), contiguous; the whole batch when off.
  adjoint::Tensor rows(const adjoint::Tensor& batch) const {
    if (!ddp_) return batch.contiguous();
    const int64_t n = batch.shape()[0] / world_;
    return batch.narrow(0, rank_ * n, n).contiguous();
  }
  /// The optimizer's zero_grad (in place) and step, or ZeRO's.
  void zero_grad(adjoint::optim::Optimizer& opt) {
    zero_ ? zero_->zero_grad(/*set_to_none=*/false) : opt.zero_grad(/*set_to_none=*/false);
  }
  void step(adjoint::optim::Optimizer& opt) { zero_ ? zero_->step() : opt.step(); }
  /// After a timed step: what the last backward's collectives cost, and what this rank holds.
  void record(const adjoint::optim::Optimizer* opt = nullptr) {
    if (!ddp_) return;
    comm_.add(ddp_->last_stats().comm_ms);
    exposed_.add(ddp_->last_stats().exposed_ms);
    overlap_.add(ddp_->last_stats().overlap());
    if (zero_) {
      memory_ = zero_->memory();
    } else if (opt) {
      memory_ = {};
      for (const adjoint::Tensor& p : ddp_->parameters())
        memory_.parameters += static_cast<int64_t>(p.nbytes());
      memory_.gradients = ddp_->gradient_bytes();
      for (const auto& [key, t] : opt->state_dict())
        if (key.rfind("state.", 0) == 0)
          memory_.optimizer_state += static_cast<int64_t>(t.nbytes());
    }
  }
  void report(Json& j) const {
    if (!ddp_) return;
    j.integer("ranks", world_);
    j.integer("zero", ddp_->zero_stage());
    j.integer("buckets", ddp_->last_stats().buckets);
    j.num("comm_ms", comm_.median());
    j.num("exposed_comm_ms", exposed_.median());
    j.num("overlap", overlap_.median());
    if (memory_.parameters > 0) {
      j.integer("rank_param_bytes", memory_.parameters);
      j.integer("rank_grad_bytes", memory_.gradients);
      j.integer("rank_optimizer_state_bytes", memory_.optimizer_state);
    }
  }

 private:
  std::unique_ptr<adjoint::dist::DistributedDataParallel> ddp_;
  std::unique_ptr<adjoint::dist::ZeroOptimizer> zero_;
  int rank_ = 0, world_ = 1;
  Samples comm_, exposed_, overlap_;
  adjoint::dist::ZeroMemory memory_;
};

}  // namespace bench
