// CommBackend: the one interface a transport implements (MPI now, NCCL with the CUDA backend
// later). ProcessGroup validates the call, allocates outputs and builds a CommRequest; the
// backend only moves bytes, in submission order, and completes the request's Work. Callers
// never see which backend runs (docs/distributed.md, "The path to NCCL").
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "adjoint/distributed/work.h"
#include "adjoint/error.h"
#include "adjoint/tensor.h"

namespace adjoint::dist {

enum class ReduceOp { Sum, Average, Max };
enum class CollectiveKind { AllReduce, Broadcast, AllGather, ReduceScatter, Barrier };

std::string to_string(ReduceOp op);
std::string to_string(CollectiveKind kind);

/// What every rank says about its call before the data moves (when the group checks shapes):
/// which collective, reduce op, root, dtype and shape, whether the call was valid here,
/// whether a differentiable collective records it for backward, and the training step and
/// phase it belongs to (ProcessGroup::step). Fixed size, so the exchange is one small
/// all_gather of int64s.
struct CallDescriptor {
  static constexpr int kMaxDims = 6;  // more dims are folded into the last one's product
  std::array<int64_t, 9 + kMaxDims> words{};
};

struct CommRequest {
  CollectiveKind kind = CollectiveKind::Barrier;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  /// Contiguous. In-place collectives (all_reduce, broadcast) have input == output.
  Tensor input;
  Tensor output;
  /// Exchange descriptors first; any disagreement or local refusal fails on every rank.
  bool check = true;
  CallDescriptor descriptor;
  /// Set when this rank refused the call (bad dtype, ...): the request still takes part in the
  /// descriptor exchange so that the other ranks fail too instead of waiting for it. A value,
  /// not an exception_ptr: the caller's thread and the backend's each throw their own copy
  /// (one exception object in flight on two threads at once is a data race).
  std::optional<Error> local_error;
};

class CommBackend {
 public:
  virtual ~CommBackend() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string name() const = 0;
  /// Queues the collective; requests run in submission order (the order every rank must
  /// call them in). The returned state is completed, with an error if it failed.
  virtual std::shared_ptr<WorkState> enqueue(CommRequest request) = 0;
  /// Finishes what is queued and releases the transport (MPI_Finalize if the backend started
  /// MPI). finalize() calls it; a second call does nothing.
  virtual void shutdown() = 0;
  /// Ends every process of the job; prints `message` with the rank first.
  [[noreturn]] virtual void abort(const std::string& message, int code) = 0;
};

}  // namespace adjoint::dist
