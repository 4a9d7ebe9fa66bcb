// parallel_for over [0, n): the range is cut into one fixed chunk per thread (never by timing),
// so a reduction that combines chunk results in chunk order is deterministic for a given
// thread count. Small ranges (below `grain` per thread) run inline.
#pragma once

#include <cstdint>
#include <functional>

namespace adjoint {

/// Number of chunks parallel_for would use for n items (for per-chunk partial results).
int parallel_chunks(int64_t n, int64_t grain);

namespace detail {
void parallel_run(int64_t n, int chunks, const std::function<void(int64_t, int64_t)>& fn);
}

template <class F>
void parallel_for(int64_t n, int64_t grain, F&& fn) {
  if (n <= 0) return;
  // Small work runs inline without building a std::function (the per-op hot path).
  if (n < 2 * grain) {
    fn(int64_t{0}, n);
    return;
  }
  int chunks = parallel_chunks(n, grain);
  if (chunks <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  detail::parallel_run(n, chunks, fn);
}

}  // namespace adjoint
