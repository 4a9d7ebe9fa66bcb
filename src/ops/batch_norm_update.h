// The in-place update of a running statistic, which batch_norm and instance_norm share.
#pragma once

#include "adjoint/tensor.h"

namespace adjoint::detail {

/// running = (1 - momentum) running + momentum stat, written once (copy_) and under no
/// gradient: a side effect, never differentiated. Errors of the write (under vmap, unbatched
/// running statistics and a batched stat) are reported as `op`'s; compile's graph break (the
/// write stops a trace, and the call runs eagerly) passes through as it is.
void update_running_statistic(const Tensor& running, const Tensor& stat, double momentum,
                              const char* op);

}  // namespace adjoint::detail
