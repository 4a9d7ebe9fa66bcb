// Fused scaled-dot-product attention (src/backend/cpu/attention.cpp): the forward and the
// gradients of softmax(scale q kᵀ + bias) v blocked over queries and keys with an online softmax,
// so that no [L, S] matrix of scores or probabilities is ever stored, and the dropout multipliers
// its kernels draw, for the math path that is their oracle. Like the kernels in kernels.h they see
// plain tensors (no autograd), accept any strides and allocate contiguous outputs.
//
// Shapes: q [*b, Hq, L, E], k [*b, Hkv, S, E], v [*b, Hkv, S, Ev] with the same batch dims *b
// (the ops layer broadcasts them first) and Hq a multiple of Hkv (grouped-query attention: query
// head h reads key/value head h / (Hq / Hkv)). The mask is undefined, bool (true = attend) or of
// q's dtype (added to the scores), and broadcasts to the scores [*b, Hq, L, S]. The seed is
// undefined (no dropout) or int64 [P, 2] with P dividing prod(*b): see Note [Attention dropout].
#pragma once

#include <cstdint>

#include "adjoint/tensor.h"

namespace adjoint::kernels {

/// What the kernels compute besides the tensors: the score scale, the causal mask (top-left
/// aligned, as PyTorch's: query i sees keys j <= i) and the dropout probability (0: none).
struct AttentionSpec {
  double scale = 1;
  bool causal = false;
  double dropout_p = 0;
};

struct AttentionForward {
  Tensor out;  ///< [*b, Hq, L, Ev], q's dtype
  Tensor lse;  ///< [*b, Hq, L]: log-sum-exp of each row of scores; float32 (float64 for float64)
};

// This family's kernels, declared once for the callers here and for each device's
// implementation (Note [The kernel table] in backend/device_kernels.h).
#include "backend/kernel_lists/attention.inc"

}  // namespace adjoint::kernels
