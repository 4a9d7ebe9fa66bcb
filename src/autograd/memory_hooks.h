// The two hooks memory tooling (include/adjoint/memory.h, src/memory/) has in the autograd hot
// paths: byte accounting of saved tensors, and the op observer called after every op and
// every backward node (src/dispatch/op_observer.h, included here). Both cost one load and a
// not-taken branch while nobody is looking.
// See Note [Saved tensor accounting] in memory_hooks.cpp.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <utility>

#include "adjoint/storage.h"

#include "adjoint/autograd.h"
#include "core/mode_state.h"
#include "dispatch/op_observer.h"

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

}  // namespace adjoint::detail
