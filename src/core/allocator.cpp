// The caching CPU allocator. Blocks are 64-byte aligned and rounded up to a size class; a
// freed block goes on its class's free list and the next request of that class reuses it.
// Training loops allocate the same sizes every step, so steady state makes no system calls.
#include "adjoint/allocator.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <vector>

namespace adjoint {
namespace {

constexpr std::size_t kAlignment = 64;

// Size classes: multiples of 64 bytes up to 4 KiB, then steps of 1/8 of the power of two
// (so at most 12.5 % of a block is slack).
std::size_t size_class(std::size_t n) {
  if (n == 0) n = 1;
  if (n <= 4096) return (n + kAlignment - 1) / kAlignment * kAlignment;
  // No system gives more, and rounding a larger request up to its size class could wrap.
  if (n > static_cast<std::size_t>(PTRDIFF_MAX)) throw std::bad_alloc();
  std::size_t p = std::size_t{1} << (63 - __builtin_clzll(n));
  std::size_t step = p / 8;
  return (n + step - 1) / step * step;
}

constexpr std::size_t kSmallClasses = 4096 / kAlignment + 1;

// A test-and-set lock: the cache is almost never contended, and an uncontended
// pthread mutex costs several times more on the per-op path.
class SpinLock {
 public:
  void lock() {
    while (flag_.test_and_set(std::memory_order_acquire)) std::this_thread::yield();
  }
  void unlock() { flag_.clear(std::memory_order_release); }

 private:
  std::atomic_flag flag_ = ATOMIC_FLAG_INIT;
};

struct Cache {
  SpinLock mu;
  // Classes up to 4 KiB (the per-op temporaries of small tensors) index an array directly;
  // larger ones go through the map.
  std::vector<void*> small[kSmallClasses];
  std::unordered_map<std::size_t, std::vector<void*>> large;
  MemoryStats stats;
  std::vector<void*>& list(std::size_t cls) {
    return cls <= 4096 ? small[cls / kAlignment] : large[cls];
  }
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: storages may die during static teardown
  return *c;
}

// The meta device's bytes: counted as the CPU allocator would count them (its size classes),
// and never allocated, so that a memory plan made on meta reads like a CPU run's statistics.
struct MetaCounter {
  SpinLock mu;
  MemoryStats stats;
};

MetaCounter& meta_counter() {
  static MetaCounter* c = new MetaCounter();  // never destroyed, as the cache
  return *c;
}

}  // namespace

namespace detail {

std::size_t block_bytes(std::size_t nbytes) { return size_class(nbytes); }

void* allocate(std::size_t nbytes) {
  std::size_t cls = size_class(nbytes);
  Cache& c = cache();
  // Only memory handed out counts: a request the system refuses (zeros({1LL << 40})) leaves
  // the current bytes and the peak as they were.
  auto count = [&] {
    c.stats.allocations++;
    c.stats.current_bytes += cls;
    c.stats.peak_bytes = std::max(c.stats.peak_bytes, c.stats.current_bytes);
  };
  {
    std::lock_guard lock(c.mu);
    std::vector<void*>& list = c.list(cls);
    if (!list.empty()) {
      void* p = list.back();
      list.pop_back();
      c.stats.cached_bytes -= cls;
      c.stats.cache_hits++;
      count();
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlignment, cls);
  if (!p) {
    empty_cache();
    p = std::aligned_alloc(kAlignment, cls);
  }
  if (!p) throw std::bad_alloc();
  std::lock_guard lock(c.mu);
  count();
  return p;
}

void deallocate(void* ptr, std::size_t nbytes) {
  if (!ptr) return;
  std::size_t cls = size_class(nbytes);
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  c.stats.current_bytes -= cls;
  c.stats.cached_bytes += cls;
  c.list(cls).push_back(ptr);
}

void count_meta_allocation(std::size_t nbytes) {
  const std::size_t cls = size_class(nbytes);
  MetaCounter& c = meta_counter();
  std::lock_guard lock(c.mu);
  c.stats.allocations++;
  c.stats.current_bytes += cls;
  c.stats.peak_bytes = std::max(c.stats.peak_bytes, c.stats.current_bytes);
}

void count_meta_deallocation(std::size_t nbytes) {
  const std::size_t cls = size_class(nbytes);
  MetaCounter& c = meta_counter();
  std::lock_guard lock(c.mu);
  c.stats.current_bytes -= cls;
}

}  // namespace detail

MemoryStats memory_stats(Device device) {
  if (device.is_meta()) {
    MetaCounter& c = meta_counter();
    std::lock_guard lock(c.mu);
    return c.stats;
  }
  return memory_stats();
}

void reset_peak_memory_stats(Device device) {
  if (device.is_meta()) {
    MetaCounter& c = meta_counter();
    std::lock_guard lock(c.mu);
    c.stats.peak_bytes = c.stats.current_bytes;
    return;
  }
  reset_peak_memory_stats();
}

MemoryStats memory_stats() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  return c.stats;
}

void reset_peak_memory_stats() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  c.stats.peak_bytes = c.stats.current_bytes;
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard lock(c.mu);
  auto drain = [&](std::size_t cls, std::vector<void*>& list) {
    for (void* p : list) std::free(p);
    c.stats.cached_bytes -= cls * list.size();
    list.clear();
  };
  for (std::size_t i = 1; i < kSmallClasses; ++i) drain(i * kAlignment, c.small[i]);
  for (auto& [cls, list] : c.large) drain(cls, list);
}

}  // namespace adjoint
