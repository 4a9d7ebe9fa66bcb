// DistributedDataParallel: the same model on every rank, each rank with its slice of the
// batch; gradients are averaged over the ranks by bucketed all-reduces that start during
// backward, as soon as a bucket's last gradient is final (the engine's post-accumulate-grad
// hooks), and are waited for at the end of backward (autograd::queue_callback). The reducer
// is PyTorch's design (docs/distributed.md, "DistributedDataParallel").
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "adjoint/distributed/process_group.h"
#include "adjoint/nn/module.h"

namespace adjoint::dist {

struct DdpOptions {
  /// The group to average over; null: the default group.
  ProcessGroup* group = nullptr;
  /// Bucket size cap (PyTorch's bucket_cap_mb = 25).
  int64_t bucket_bytes = 25 << 20;
  /// The first bucket (the gradients that are final first) is smaller, so that
  /// communication starts early in backward (PyTorch's 1 MiB).
  int64_t first_bucket_bytes = 1 << 20;
  /// Parameters may go without a gradient in a backward (a branch not taken, a frozen head):
  /// they count as zero in the average, and those that got none on any rank keep their .grad
  /// as it was (undefined after zero_grad), so optimizers skip them as in one process. Off, a
  /// parameter without a gradient on some rank is an error on every rank. (Either way one
  /// small all-reduce per backward counts the ranks that had each gradient.)
  bool find_unused_parameters = false;
  /// After the first synchronising backward, rebuild the buckets in the order the gradients
  /// became final (rank 0's order, broadcast), so each bucket fills as early as possible.
  bool rebuild_buckets = true;
  /// Broadcast rank 0's parameters and buffers at construction.
  bool broadcast_at_start = true;
  /// ZeRO sharding (with dist::ZeroOptimizer, zero.h): 0 plain data parallel; 1 the same
  /// all-reduce, the optimizer state sharded; 2 each bucket reduce-scattered, so that a rank
  /// keeps only its shard of the gradients (parameters' .grad are released as they are
  /// copied into a bucket). With a stage, buckets keep reverse parameter order (the shards
  /// must not move under the optimizer state) and find_unused_parameters is refused.
  int zero_stage = 0;
  /// After a synchronising backward each parameter's .grad is a view of its slot in the
  /// bucket (PyTorch's option of this name): one copy of the gradients instead of two, and
  /// with zero_grad(set_to_none = false) the next backward accumulates straight into the
  /// buckets, with no copy. Not with zero_stage 2, which keeps no whole gradient.
  bool gradient_as_bucket_view = false;
};

/// What the last synchronising backward did (for benchmarks and tests).
struct DdpStepStats {
  int buckets = 0;
  int64_t bytes = 0;                 ///< gradient bytes all-reduced
  int launched_during_backward = 0;  ///< buckets whose all-reduce started from a hook
  double comm_ms = 0;                ///< time the collectives ran on the communication thread
  double exposed_ms = 0;             ///< time the end of backward waited for them
  /// The share of comm_ms hidden behind backward: 1 - exposed / comm, clamped to [0, 1].
  double overlap() const;
};

/// Attaches to a model's parameters that require grad, through hooks on them: the model is
/// called as usual, no wrapper in the forward. Every rank constructs it over the same model
/// structure, and every rank must run backward through the model each step (the all-reduces
/// are collectives). Backward runs that reach the parameters average their gradients over
/// the ranks; inside a no_sync() scope they only accumulate locally, and the next backward
/// outside it averages the sum. Not for several backward runs at once on other threads, nor
/// for a backward nested in another that reaches the model. Every rank's backward must reach
/// at least one parameter (its first hook is what joins the run's collectives). DDP's hooks
/// run before hooks registered after it, which see .grad before it is averaged (released,
/// with stage 2). Destroying it removes the hooks.
class DistributedDataParallel {
 public:
  /// The module's parameters (and, with broadcast_at_start, its buffers).
  explicit DistributedDataParallel(nn::Module& module, DdpOptions options = {});
  /// A model kept as a list of tensors: the parameters in the model's order (the later ones
  /// are expected to get their gradients first, as in a layer stack).
  explicit DistributedDataParallel(const std::vector<Tensor>& params, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// While the guard lives, backward accumulates into .grad without communicating (gradient
  /// accumulation over micro-batches); the first backward after it averages the total.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp), prev_(ddp.sync_) {
      ddp.sync_ = false;
    }
    ~NoSync() { ddp_.sync_ = prev_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  /// The parameters DDP averages (those of the module that require grad), in module order.
  const std::vector<Tensor>& parameters() const { return params_; }
  /// The buckets, each a list of indices into parameters(), in launch order.
  const std::vector<std::vector<int64_t>>& buckets() const { return bucket_members_; }
  /// The order in which the parameters' gradients became final in the first synchronising
  /// backward (empty before it).
  const std::vector<int64_t>& observed_ready_order() const { return first_order_; }
  const DdpStepStats& last_stats() const { return stats_; }
  int zero_stage() const { return options_.zero_stage; }
  ProcessGroup& group() { return group_; }

  // ---- the bucket layout, for ZeroOptimizer: bucket b holds its members' elements one after
  // another, zero-padded to a multiple of the world size; rank r owns the r-th equal chunk ----

  /// Elements of bucket b (its members' numel summed) and its padded length.
  int64_t bucket_numel(std::size_t b) const;
  int64_t bucket_padded_numel(std::size_t b) const;
  /// Where parameter i's elements start in its bucket.
  int64_t offset_in_bucket(std::size_t i) const { return offset_of_.at(i); }
  /// Stage 2: this rank's chunk of bucket b's averaged gradient, summed over the synchronising
  /// backward runs since clear_shard_gradients(); undefined before any.
  const Tensor& shard_gradient(std::size_t b) const;
  void clear_shard_gradients();
  /// Bytes of the bucket buffers and shard gradients held now (memory reports).
  int64_t buffer_bytes() const;
  /// Bytes of gradients this rank holds for the parameters: their .grad (unless it is a
  /// view of a bucket), the buckets and the shard gradients.
  int64_t gradient_bytes() const;

 private:
  struct Bucket;
  struct RunGuard;
  DistributedDataParallel(std::vector<std::pair<std::string, Tensor>> named,
                          std::vector<Tensor> buffers, DdpOptions options);
  void build_buckets(const std::vector<int64_t>& order);
  DType bucket_dtype(std::size_t b) const;
  Tensor bucket_slot(int64_t index);
  void fill_slot(int64_t index);
  bool grad_is_slot(int64_t index) const;
  void on_grad_ready(int64_t index);
  void launch_ready_buckets(bool from_hook);
  void finish_backward();
  void abandon_run();
  void reset_run();

  DdpOptions options_;
  ProcessGroup& group_;
  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::vector<HookHandle> hooks_;
  bool sync_ = true;

  std::vector<std::vector<int64_t>> bucket_members_;
  std::vector<Bucket> buckets_;
  std::vector<int64_t> bucket_of_;  // parameter -> bucket
  std::vector<int64_t> offset_of_;  // parameter -> element offset in its bucket

  // The backward run in progress (between the first hook and the end-of-run callback).
  bool in_run_ = false;
  std::vector<char> ready_;
  std::vector<int64_t> pending_;  // per bucket: parameters not final yet
  std::size_t next_launch_ = 0;
  int launched_from_hooks_ = 0;
  std::vector<int64_t> order_;  // ready order of this run
  bool rebuilt_ = false;
  std::vector<int64_t> first_order_;
  DdpStepStats stats_;
};

}  // namespace adjoint::dist
