// The process-wide counters behind checkpoint_stats() (checkpoint.h).
#pragma once

#include <atomic>
#include <cstdint>

namespace adjoint::detail {

struct CheckpointCounters {
  std::atomic<int64_t> regions{0};
  std::atomic<int64_t> recomputations{0};
  std::atomic<int64_t> replayed_ops{0};
  std::atomic<int64_t> kept_tensors{0};
  std::atomic<int64_t> kept_bytes{0};
};

CheckpointCounters& checkpoint_counters();

}  // namespace adjoint::detail
