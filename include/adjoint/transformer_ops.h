// The functional pieces of the Llama block (docs/attention.md, "The Llama block"): RMS
// normalisation and rotary position embeddings. Both are composites of differentiable ops, so
// they have every derivative, batch under vmap and trace under compile with no rules of their
// own; the modules that use them are in adjoint/nn/llama_block.h.
#pragma once

#include <cstdint>

#include "adjoint/dtype.h"
#include "adjoint/tensor.h"

namespace adjoint {

/// y = x / sqrt(mean(x², last dim) + eps) * weight, as torch.nn.functional.rms_norm over the
/// last dim (and Llama's RMSNorm). weight [x.size(-1)] is optional. A 16-bit x is normalised in
/// float32 and rounded back, as Llama's reference does.
Tensor rms_norm(const Tensor& x, const Tensor& weight = {}, double eps = 1e-6);

/// The cosines and sines of rotary embedding for positions offset .. offset + positions - 1,
/// each [positions, head_dim] in `dtype`:
///   angle[t, i] = (offset + t) base^(-2 (i mod D/2) / D),  D = head_dim (even).
/// Computed in float64, then rounded once.
struct RotaryTables {
  Tensor cos;
  Tensor sin;
};
RotaryTables rotary_tables(int64_t positions, int64_t head_dim, double base = 10000,
                           int64_t offset = 0, DType dtype = DType::Float32);

/// Rotary position embedding of x [..., T, D] (D even) with tables [T, D] (rotary_tables), in the
/// half-rotated pairing of Hugging Face's Llama (`rotate_half`): element i is paired with
/// element i + D/2, and the pair (a, b) at position t turns by angle θ_t,i:
///   y[i] = a cos θ - b sin θ,  y[i + D/2] = b cos θ + a sin θ,  i < D/2.
/// (Meta's original code pairs neighbours 2i, 2i+1 instead; the two differ by a fixed
/// permutation of q and k's features, so weights convert by permuting wq and wk rows.)
Tensor apply_rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin);

/// apply_rotary_embedding with the tables for positions offset .. offset + T - 1 of x [..., T, D]:
/// `offset` is the number of positions already seen (a KV cache's length in generation).
Tensor rotary_embedding(const Tensor& x, int64_t offset = 0, double base = 10000);

}  // namespace adjoint
