// The CPU caching allocator: 64-byte aligned blocks, freed blocks kept per size and reused,
// and byte statistics (current, peak, cached) that memory tooling and benchmarks read.
#pragma once

#include <cstddef>
#include <cstdint>

#include "adjoint/device.h"

namespace adjoint {

struct MemoryStats {
  std::size_t current_bytes = 0;  ///< bytes held by live storages
  std::size_t peak_bytes = 0;     ///< most current_bytes since the last reset
  std::size_t cached_bytes = 0;   ///< freed blocks kept for reuse
  uint64_t allocations = 0;       ///< blocks handed out (cache hits included)
  uint64_t cache_hits = 0;        ///< of those, served from the cache
};

MemoryStats memory_stats();
/// Sets peak_bytes to current_bytes.
void reset_peak_memory_stats();
/// The statistics of one device: the CPU allocator's, or the bytes meta tensors would take
/// (counted in the CPU allocator's size classes; nothing is cached, nothing allocated).
MemoryStats memory_stats(Device device);
void reset_peak_memory_stats(Device device);
/// Returns every cached block to the system.
void empty_cache();

namespace detail {
/// A 64-byte aligned block of at least nbytes; std::bad_alloc when the system has none (the
/// tensor factories turn that into an adjoint::Error naming the op, shape and dtype).
void* allocate(std::size_t nbytes);
void deallocate(void* ptr, std::size_t nbytes);
/// The bytes a request of nbytes takes (its size class): what MemoryStats counts for it.
std::size_t block_bytes(std::size_t nbytes);
/// The meta device's bookkeeping of a storage of nbytes made and dropped.
void count_meta_allocation(std::size_t nbytes);
void count_meta_deallocation(std::size_t nbytes);
}  // namespace detail

}  // namespace adjoint
