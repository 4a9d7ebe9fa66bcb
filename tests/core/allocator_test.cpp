// The caching allocator: alignment, reuse of freed blocks, and the byte statistics.
#include <gtest/gtest.h>

#include <cstdint>

#include "adjoint/adjoint.h"

using namespace adjoint;

TEST(Allocator, BlocksAre64ByteAligned) {
  for (int64_t n : {1, 3, 17, 1000, 100000}) {
    Tensor t = empty({n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u) << n;
  }
}

TEST(Allocator, FreedBlocksAreReused) {
  void* first;
  {
    Tensor t = empty({12345});
    first = t.raw_data();
  }
  MemoryStats before = memory_stats();
  Tensor again = empty({12345});
  EXPECT_EQ(again.raw_data(), first);
  EXPECT_EQ(memory_stats().cache_hits, before.cache_hits + 1);
}

TEST(Allocator, CurrentAndPeakBytes) {
  const std::size_t base = memory_stats().current_bytes;
  reset_peak_memory_stats();
  {
    Tensor a = empty({1 << 20});  // 4 MiB of float32
    EXPECT_GE(memory_stats().current_bytes, base + (4u << 20));
    Tensor b = empty({1 << 18});
    EXPECT_GE(memory_stats().peak_bytes, base + (5u << 20));
  }
  EXPECT_EQ(memory_stats().current_bytes, base);
  EXPECT_GE(memory_stats().peak_bytes, base + (5u << 20));
  reset_peak_memory_stats();
  EXPECT_EQ(memory_stats().peak_bytes, base);
  EXPECT_GT(memory_stats().cached_bytes, 0u);
  empty_cache();
  EXPECT_EQ(memory_stats().cached_bytes, 0u);
}
