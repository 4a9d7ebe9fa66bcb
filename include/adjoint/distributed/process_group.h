// The process group: this process's rank among `world_size` processes and the collectives
// between them (all_reduce, broadcast, all_gather, reduce_scatter, barrier), each blocking or
// asynchronous with a wait handle. Not differentiable: see distributed/functional.h for that.
// The transport is a CommBackend (comm_backend.h): MPI today, NCCL later, same callers.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "adjoint/distributed/comm_backend.h"
#include "adjoint/distributed/work.h"
#include "adjoint/tensor.h"

namespace adjoint::dist {

/// Which transport init() starts.
enum class BackendKind {
  Auto,   ///< MPI when launched by mpirun (its environment variables are set), else Local
  Local,  ///< one process, world size 1: every collective is the identity; no MPI at all
  Mpi,    ///< MPI; without mpirun it is an MPI singleton (world size 1)
};

struct InitOptions {
  BackendKind backend = BackendKind::Auto;
  /// Before each collective, ranks exchange a small descriptor (dtype, shape, and whether the
  /// call was valid on that rank) so that a mismatch is an Error on every rank naming each
  /// rank's shape, instead of a hang or garbage. Costs one small extra collective per call.
  bool check_shapes = true;
  /// Install a std::terminate handler that prints the exception with the rank and ends the
  /// whole job (MPI_Abort), so that one rank's uncaught error cannot leave the others hanging.
  bool abort_on_terminate = true;
};

/// A group of processes and the collectives between them. Every rank must call the same
/// collectives in the same order with tensors of the same shape and dtype (as in MPI).
/// Collectives are queued in call order and run one at a time on the backend's communication
/// thread; the calling thread may go on computing until it waits.
class ProcessGroup {
 public:
  ProcessGroup(std::unique_ptr<CommBackend> backend, bool check_shapes);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int world_size() const;
  /// "local", "mpi" (later "nccl").
  std::string backend_name() const;

  /// The training step this group's collectives belong to: the steps begun so far (0 before
  /// the first). DistributedDataParallel advances it as each synchronising backward run
  /// begins. Every collective's descriptor carries it, so that a rank out of step (one that
  /// caught an error inside a step and went on) is an Error on every rank at the first
  /// collective that mixes steps, naming each rank's step, instead of averaging one rank's
  /// step with another's (docs/distributed.md, "Ranks out of step").
  int64_t step() const { return step_.load(std::memory_order_relaxed); }
  /// Begins the next step and returns it. Every rank must call it at the same point of its
  /// collectives (DDP does; a loop that averages by hand may call it once per step).
  int64_t advance_step() { return step_.fetch_add(1, std::memory_order_relaxed) + 1; }

  /// Reduces `tensor` over all ranks in place (Sum, Average or Max); every rank gets the
  /// result. float32, float64 or int64 (Average: floating point only). Bumps its version.
  /// The tensor is a handle: the values it refers to change (so `all_reduce(p.grad())` works).
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  Work all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  /// Overwrites `tensor` on every rank with root's values (any dtype), in place.
  void broadcast(const Tensor& tensor, int root = 0);
  Work broadcast_async(const Tensor& tensor, int root = 0);
  /// The ranks' tensors (same shape [n, ...]) stacked along dim 0 in rank order:
  /// [world_size * n, ...]. A 0-d tensor counts as [1].
  Tensor all_gather(const Tensor& tensor);
  Work all_gather_async(const Tensor& tensor);
  /// Reduces the ranks' tensors [world_size * n, ...] and hands rank r rows [r*n, (r+1)*n).
  Tensor reduce_scatter(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  Work reduce_scatter_async(const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  /// Returns once every rank has called it.
  void barrier();
  Work barrier_async();

  /// Ends every process of the job with `message` (printed with this rank on stderr) and exit
  /// code `code`. For error paths only: use it where a rank cannot go on, so that the others
  /// do not wait for it forever in a collective.
  [[noreturn]] void abort(const std::string& message, int code = 1);

  CommBackend& backend() { return *backend_; }

 private:
  Work submit(CommRequest request);

  std::unique_ptr<CommBackend> backend_;
  bool check_shapes_;
  std::atomic<int64_t> step_{0};
};

/// Starts the default process group (MPI_Init_thread when the backend is MPI and MPI is not
/// initialised yet). A second call while one is running is an error.
ProcessGroup& init(const InitOptions& options = {});
/// Whether init() ran and finalize() has not.
bool is_initialized();
/// The default group; an Error when init() has not run.
ProcessGroup& default_group();
/// Waits for queued collectives, stops the communication thread and finalises MPI if init()
/// initialised it. Safe to call when not initialised.
void finalize();

/// init() in the constructor, finalize() in the destructor. If the destructor runs while an
/// exception unwinds through it, the job is aborted instead: the other ranks may be waiting
/// in a collective, and MPI_Finalize would wait for them in turn.
class Environment {
 public:
  explicit Environment(const InitOptions& options = {});
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;
  ProcessGroup& group() { return default_group(); }

 private:
  int uncaught_at_start_;
};

}  // namespace adjoint::dist
