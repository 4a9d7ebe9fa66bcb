// Work: the wait handle of an asynchronous collective. A backend completes it from wherever
// its collectives make progress (the MPI communication thread; a CUDA event for NCCL later).
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>

#include "adjoint/tensor.h"

namespace adjoint::dist {

/// What a backend completes. The default is a promise (a flag, a condition variable and the
/// error, if any); a GPU backend would derive one that waits on a stream event instead.
class WorkState {
 public:
  virtual ~WorkState() = default;
  /// Blocks until the collective has finished; rethrows its error.
  virtual void wait();
  virtual bool is_completed() const;
  /// Called once by the backend; `error` null on success.
  void complete(std::exception_ptr error = nullptr);

  /// The collective's result (the tensor itself for the in-place ones).
  Tensor output;
  /// When the backend began and ended moving the data (the communication thread's clock),
  /// set before complete(): what DDP reports as time spent in collectives.
  std::chrono::steady_clock::time_point started{}, finished{};

 protected:
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

/// A handle on one asynchronous collective; cheap to copy. Dropping it without wait() lets
/// the collective finish on its own (its tensors stay alive until then); do not touch the
/// tensors it reads or writes before wait() returns.
class Work {
 public:
  Work() = default;
  explicit Work(std::shared_ptr<WorkState> state) : state_(std::move(state)) {}
  /// Blocks until done; throws the collective's error (the same on every rank for a mismatch
  /// found by the shape check). An empty handle is done.
  void wait() const;
  bool is_completed() const;
  /// wait(), then the result: the reduced/broadcast tensor, or the new gathered/scattered one.
  Tensor result() const;
  /// wait(), then how long the backend spent moving the data (zero for an empty handle).
  std::chrono::steady_clock::duration elapsed() const;

 private:
  std::shared_ptr<WorkState> state_;
};

}  // namespace adjoint::dist
