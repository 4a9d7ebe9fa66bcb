// The saved-tensor byte registry behind memory_hooks.h.
//
// Note [Saved tensor accounting]
// Saved bytes count distinct storages, as PyTorch users expect: a storage saved by several
// nodes, or through several views of it, is counted once, and counted whole (a saved view
// keeps all of its storage alive). Each SavedTensor that holds a storage puts a claim on it
// in a process-wide registry (storage -> number of claims, bytes); the storage's bytes are
// added on its first claim and removed with its last. What a SavedTensor holds is its tensor,
// or, under saved-tensor hooks, the Tensor the pack hook returned (so a compressed copy counts
// its own, smaller, bytes and a hook that moved the data elsewhere counts nothing).
// The counting sits right next to SavedTensor's pack path rather than being a pack hook
// itself: hooks nest with the innermost pair winning, so an accounting hook would hide, or be
// hidden by, the checkpointing and offload hooks it has to measure. Counting is off unless a
// tracker is alive (one relaxed load per saved tensor), so the op hot path pays nothing when
// nobody is looking; a tensor saved while it was off is never counted, also not on release.
#include "autograd/memory_hooks.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace adjoint::detail {
namespace {

struct Registry {
  struct Entry {
    std::size_t bytes = 0;
    std::size_t claims = 0;
  };
  std::mutex mu;
  std::unordered_map<const StorageImpl*, Entry> entries;
  SavedRegistryStats stats;
  std::size_t window_peak = 0;  // see take_saved_window_peak
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: nodes may die during static teardown
  return *r;
}

}  // namespace

std::atomic<int> saved_tracking_requests{0};

void SavedBytesClaim::claim(const StorageImpl* storage) {
  reset();
  if (!storage) return;
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  Registry::Entry& e = r.entries[storage];
  if (e.claims++ == 0) {
    e.bytes = storage->nbytes();
    r.stats.current_bytes += e.bytes;
    r.stats.peak_bytes = std::max(r.stats.peak_bytes, r.stats.current_bytes);
    r.window_peak = std::max(r.window_peak, r.stats.current_bytes);
    r.stats.storages++;
  }
  r.stats.tensors++;
  storage_ = storage;
}

void SavedBytesClaim::release() noexcept {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.entries.find(storage_);
  storage_ = nullptr;
  if (it == r.entries.end()) return;  // cannot happen: every claim has its entry
  r.stats.tensors--;
  if (--it->second.claims == 0) {
    r.stats.current_bytes -= it->second.bytes;
    r.stats.storages--;
    r.entries.erase(it);
  }
}

SavedRegistryStats saved_registry_stats() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return r.stats;
}

void reset_saved_registry_peak() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.stats.peak_bytes = r.stats.current_bytes;
}

std::size_t take_saved_window_peak() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  return std::exchange(r.window_peak, r.stats.current_bytes);
}

}  // namespace adjoint::detail
