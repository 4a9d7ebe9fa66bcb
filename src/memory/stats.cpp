// Live and peak bytes: the saved-tensor registry (src/autograd/memory_hooks.cpp, Note [Saved
// tensor accounting]) and the caching allocator's statistics, side by side.
#include "adjoint/allocator.h"
#include "adjoint/memory.h"
#include "autograd/memory_hooks.h"

namespace adjoint {

SavedMemoryTracker::SavedMemoryTracker() {
  if (detail::saved_tracking_requests.fetch_add(1) == 0) detail::reset_saved_registry_peak();
}

SavedMemoryTracker::~SavedMemoryTracker() { detail::saved_tracking_requests.fetch_sub(1); }

bool saved_memory_tracking() { return detail::saved_tracking_enabled(); }

SavedMemoryStats saved_memory_stats() {
  const detail::SavedRegistryStats r = detail::saved_registry_stats();
  return {r.current_bytes, r.peak_bytes, r.tensors, r.storages};
}

void reset_peak_saved_memory_stats() { detail::reset_saved_registry_peak(); }

MemoryUsage memory_usage() {
  const SavedMemoryStats saved = saved_memory_stats();
  const MemoryStats storage = memory_stats();
  return {saved.current_bytes, saved.peak_bytes, storage.current_bytes, storage.peak_bytes};
}

void reset_peak_memory_usage() {
  reset_peak_saved_memory_stats();
  reset_peak_memory_stats();
}

}  // namespace adjoint
