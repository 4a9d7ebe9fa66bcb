// The gemm bound of a workload's step (Note [The gemm bound] in gemm_bound.cpp): the time the
// products and convolutions one step calls take, each timed alone.
#pragma once

#include <functional>

#include "adjoint/adjoint.h"
#include "report.h"

namespace bench {

struct GemmBound {
  double ms = 0;           ///< the sum over one step of each call's best time alone
  long long calls = 0;     ///< products and convolutions the step called
  long long distinct = 0;  ///< of them, distinct (kind, shapes, strides, dtypes, geometry)
};

/// Runs `one_step` once with every product and convolution recorded, then times each distinct
/// call alone (best of several runs, this process's threads) and sums them over the step.
GemmBound measure_gemm_bound(const std::function<void()>& one_step);

/// Adds gemm_bound_ms, step_over_gemm_bound (ms_per_step over it), gemm_bound_calls and
/// gemm_bound_distinct to `j`.
void report_gemm_bound(Json& j, double ms_per_step, const std::function<void()>& one_step);

}  // namespace bench
