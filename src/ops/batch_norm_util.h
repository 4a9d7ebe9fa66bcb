// What batch_norm.cpp and group_norm.cpp share: per-channel reductions with ops, and the
// in-place update of a running statistic.
#pragma once

#include <cstdint>
#include <vector>

#include "adjoint/ops.h"
#include "adjoint/tensor.h"

namespace adjoint::detail {

// Note [Per-channel reductions]
// Batch norm reduces every dim but 1. A reduction over dims {0, 2, 3} at once walks memory with a
// stride in the library's reduce kernel (25 ms for a [64, 64, 28, 28] float32 sum on two cores,
// against 0.4 ms for the trailing dims and then dim 0), so the rules reduce the trailing dims
// first and then the leading ones: the same sum, the mean as a mean of equal-sized means.

// Per-channel helpers for an input of `rank` dims whose channels are at dim `channel` (1, or 2
// in a batching rule's [B, N, C, *]): a [C] tensor as [1, C, 1, ...] (a view), and the
// per-channel sum and mean over every other dim, as [C] or kept ([1, C, 1, ...]).
struct Channels {
  int64_t rank;
  int64_t channel = 1;
  Tensor bc(const Tensor& t) const {
    Shape s(static_cast<std::size_t>(rank), 1);
    s[static_cast<std::size_t>(channel)] = t.size(-1);
    for (int64_t d = 0; d + 1 < t.dim(); ++d) s[static_cast<std::size_t>(d)] = t.size(d);
    return t.reshape(s);
  }
  std::vector<int64_t> trailing() const {
    std::vector<int64_t> dims;
    for (int64_t d = channel + 1; d < rank; ++d) dims.push_back(d);
    return dims;
  }
  std::vector<int64_t> leading() const {
    std::vector<int64_t> dims;
    for (int64_t d = channel == 1 ? 0 : 1; d < channel; ++d) dims.push_back(d);
    return dims;
  }
  // See Note [Per-channel reductions].
  Tensor sum_c(const Tensor& t) const {
    const Tensor inner = rank > channel + 1 ? sum(t, trailing()) : t;
    return sum(inner, leading());
  }
  Tensor mean_c(const Tensor& t) const {
    const Tensor inner = rank > channel + 1 ? mean(t, trailing()) : t;
    return mean(inner, leading());
  }
  Tensor avg(const Tensor& t) const { return bc(mean_c(t)); }
};

/// running = (1 - momentum) running + momentum stat, written once (copy_) and under no
/// gradient: a side effect, never differentiated. Errors of the write (under vmap, unbatched
/// running statistics and a batched stat) are reported as `op`'s; compile's graph break (the
/// write stops a trace, and the call runs eagerly) passes through as it is.
void update_running_statistic(const Tensor& running, const Tensor& stat, double momentum,
                              const char* op);

}  // namespace adjoint::detail
