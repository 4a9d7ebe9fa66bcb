// parallel_for over [0, n): the range is cut into one fixed chunk per thread (never by timing),
// so a reduction that combines chunk results in chunk order is deterministic for a given
// thread count. Small ranges (below `grain` per thread) run inline.
#pragma once

#include <cstdint>
#include <functional>

namespace adjoint {

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

/// Number of chunks parallel_for would use for n items (for per-chunk partial results).
int parallel_chunks(int64_t n, int64_t grain);

}  // namespace adjoint
