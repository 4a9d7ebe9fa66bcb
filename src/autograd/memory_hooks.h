// The two hooks memory tooling (include/adjoint/memory.h, src/memory/) has in the autograd hot
// paths: byte accounting of saved tensors, and an observer called after every op and every
// backward node. Both cost one load and a not-taken branch while nobody is looking.
// See Note [Saved tensor accounting] in memory_hooks.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <utility>

#include "adjoint/storage.h"

#include "adjoint/autograd.h"
#include "core/mode_state.h"

namespace adjoint::detail {

/// Saved-tensor trackers alive (SavedMemoryTracker, MemoryTimeline); zero means no counting.
extern std::atomic<int> saved_tracking_requests;

inline bool saved_tracking_enabled() {
  return saved_tracking_requests.load(std::memory_order_relaxed) != 0;
}

/// One saved tensor's claim on a storage in the process-wide registry: counted while it
/// holds a storage, uncounted by reset() or its destructor. Copies count again; moves transfer
/// the claim. A SavedTensor carries one (see saved_tensor.h).
class SavedBytesClaim {
 public:
  SavedBytesClaim() = default;
  ~SavedBytesClaim() {
    if (storage_) release();
  }
  SavedBytesClaim(const SavedBytesClaim& o) {
    if (o.storage_) claim(o.storage_);
  }
  SavedBytesClaim(SavedBytesClaim&& o) noexcept : storage_(o.storage_) { o.storage_ = nullptr; }
  SavedBytesClaim& operator=(const SavedBytesClaim& o) {
    if (this != &o) {
      reset();
      if (o.storage_) claim(o.storage_);
    }
    return *this;
  }
  SavedBytesClaim& operator=(SavedBytesClaim&& o) noexcept {
    if (this != &o) {
      reset();
      storage_ = o.storage_;
      o.storage_ = nullptr;
    }
    return *this;
  }

  /// Counts `storage` (null: nothing held, nothing counted). Call only while tracking.
  void claim(const StorageImpl* storage);
  void reset() {
    if (storage_) release();
  }

 private:
  void release() noexcept;
  // The registry's key; the bytes are kept in the registry, so the storage is never read
  // again (it may already be gone when a node dies without running).
  const StorageImpl* storage_ = nullptr;
};

/// Live and peak bytes of the registry (distinct storages), and how many claims it holds.
struct SavedRegistryStats {
  std::size_t current_bytes = 0;
  std::size_t peak_bytes = 0;
  std::size_t tensors = 0;
  std::size_t storages = 0;
};
SavedRegistryStats saved_registry_stats();
void reset_saved_registry_peak();
/// The most current_bytes since the previous call (or since tracking began), then restarts
/// the window at current_bytes: what a timeline event reports as the peak within its op.
/// Independent of peak_bytes, so timelines and users' peak queries do not disturb each other.
std::size_t take_saved_window_peak();

/// Called around every op that goes through apply<Op> and every node the backward engine
/// runs, on the thread that installed it. See Note [Op observer] in memory_hooks.cpp. An
/// observer that displaces another passes every call on to it.
class OpObserver {
 public:
  virtual ~OpObserver() = default;
  /// Before the op's forward runs (what profiles time from). An op that throws gets
  /// forward_op_failed instead of after_forward_op.
  virtual void before_forward_op(const char* op) {
    if (next_) next_->before_forward_op(op);
  }
  /// Called just before after_forward_op with the op's `n` inputs (undefined ones included)
  /// and its output: what FLOP counting reads (checkpoint budgets, see Note [FLOP counting]
  /// in src/checkpoint/budget_profile.cpp).
  virtual void forward_op_tensors(const char* op, const Tensor* inputs, std::size_t n,
                                  const Tensor& output) {
    if (next_) next_->forward_op_tensors(op, inputs, n, output);
  }
  /// `op` is Op::name ("exp"); the op's node and saved tensors are in place.
  virtual void after_forward_op(const char* op) {
    if (next_) next_->after_forward_op(op);
  }
  /// Instead of after_forward_op when the op threw (its error is on its way to the caller).
  virtual void forward_op_failed(const char* op) {
    if (next_) next_->forward_op_failed(op);
  }
  /// Before the node's apply (what profiles time from).
  virtual void before_backward_node(const Node& node) {
    if (next_) next_->before_backward_node(node);
  }
  /// Just after the node's apply, with the gradients it returned for its inputs.
  virtual void backward_node_tensors(const Node& node, const TensorList& grads) {
    if (next_) next_->backward_node_tensors(node, grads);
  }
  /// `node` is the node's name() ("ExpBackward"); its saved tensors are freed (unless
  /// retain_graph) and its gradients passed on.
  virtual void after_backward_node(const std::string& node) {
    if (next_) next_->after_backward_node(node);
  }

 protected:
  /// The observer this one displaced from tls_op_observer. Observers compose: each default
  /// above passes the call on to it, and an override calls the base version when done.
  OpObserver* next_ = nullptr;
};

/// The top of the thread's observer chain; set it with set_op_observer.
extern constinit thread_local OpObserver* tls_op_observer;

/// Makes `o` the top of the chain (null: none), with the dispatch stack's Observe layer.
inline void set_op_observer(OpObserver* o) {
  tls_op_observer = o;
  set_layer_active(Layer::Observe, o != nullptr);
}

/// Hides the thread's observers while alive (what runs meanwhile is not an op of the
/// program: a backward node's insides, a tool's own copies and checks) and puts them back.
class OpObserverPause {
 public:
  OpObserverPause() : paused(tls_op_observer) { set_op_observer(nullptr); }
  ~OpObserverPause() { set_op_observer(paused); }
  OpObserverPause(const OpObserverPause&) = delete;
  OpObserverPause& operator=(const OpObserverPause&) = delete;

  OpObserver* const paused;  ///< the observer chain hidden, or null
};

}  // namespace adjoint::detail
