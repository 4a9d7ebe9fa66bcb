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
/// softmax(scale q kᵀ + bias) v with the dropout of `seed` on the probabilities. A row whose
/// every key is masked gives 0 (and log-sum-exp 0), as PyTorch's kernels since 2.5.
AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& mask, const Tensor& seed,
                                   const AttentionSpec& spec);

/// The gradients of attention_forward with respect to q, k and v for the output's gradient
/// `dout`, given the forward's output and log-sum-exp, packed into one contiguous 1-d tensor of
/// q's dtype: dq's elements ([*b, Hq, L, E]), then dk's, then dv's, each contiguous.
Tensor attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, const Tensor& mask,
                          const Tensor& seed, const AttentionSpec& spec);

/// The multipliers the kernels apply to the probabilities for dropout p with `seed`: for the
/// scores shape [*b, Hq, L, S], 1 / (1 - p) where an element is kept and 0 where it is dropped,
/// in `dtype` (for the math path, which must drop what the kernels drop).
Tensor attention_dropout_scale(const Tensor& seed, const Shape& scores, double p, DType dtype);

}  // namespace adjoint::kernels
