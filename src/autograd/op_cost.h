// What an op costs, counted rather than timed: its FLOPs by the convention of Note [FLOP
// counting] (src/checkpoint/budget_profile.cpp), and the bytes of the tensors it reads and
// writes. Checkpoint budgets and the profiler (src/debug/profiler.cpp) count the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "adjoint/tensor.h"

namespace adjoint::detail {

/// FLOPs of forward op `op` on `inputs` (n of them, undefined ones allowed) giving `out`:
/// 2mnk for matmul, linear and dot, 0 for views, else the largest element count.
uint64_t op_flops(std::string_view op, const Tensor* inputs, std::size_t n, const Tensor& out);

/// Bytes of the defined tensors among `tensors` (n of them), each counted at its logical size.
uint64_t tensor_bytes(const Tensor* tensors, std::size_t n);

}  // namespace adjoint::detail
