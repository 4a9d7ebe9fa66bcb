// Scaled-dot-product attention (src/ops/attention.cpp, docs/attention.md): PyTorch's
// torch.nn.functional.scaled_dot_product_attention, on a fused kernel that never stores the
// [L, S] scores, and the matmul/softmax composite it is tested against.
#pragma once

#include <optional>

#include "adjoint/generator.h"
#include "adjoint/tensor.h"

namespace adjoint {

/// softmax(query keyᵀ scale + bias) value, as torch.nn.functional.scaled_dot_product_attention:
///   query [..., Hq, L, E], key [..., Hkv, S, E], value [..., Hkv, S, Ev] -> [..., Hq, L, Ev],
/// the leading dims broadcasting (and with enable_gqa = false the head dims too).
/// - attn_mask: a bool mask (true = attend) or a float mask of query's dtype added to the scores,
///   broadcasting to [..., Hq, L, S]. A float mask that requires grad gets its gradient.
/// - is_causal: query i sees keys j <= i (top-left aligned when L != S, as PyTorch's); not
///   together with attn_mask.
/// - dropout_p: dropout on the probabilities, always (as PyTorch's function; modules pass 0 when
///   not training), drawn from `gen` (the default generator when null).
/// - scale: 1 / sqrt(E) by default.
/// - enable_gqa: grouped-query attention, Hq a multiple of Hkv: query head h reads key/value head
///   h / (Hq / Hkv), as repeat_interleave of key and value would give.
/// A row whose every key is masked gives 0 (and no gradient), as PyTorch since 2.5.
/// One op: its forward keeps q, k, v, the output and one float32 log-sum-exp per query row,
/// and its backward recomputes the probabilities block by block.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = {}, double dropout_p = 0,
                                    bool is_causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    bool enable_gqa = false, Generator* gen = nullptr);

/// The same function as matmul, softmax and matmul (PyTorch's math backend), with the same
/// arguments and semantics. It stores the [..., Hq, L, S] probabilities for backward; for the
/// same generator state it drops the same elements as the fused op. The oracle of the fused op's
/// tests, and the faster of the two for small problems (docs/attention.md, "Measured").
Tensor scaled_dot_product_attention_math(const Tensor& query, const Tensor& key,
                                         const Tensor& value, const Tensor& attn_mask = {},
                                         double dropout_p = 0, bool is_causal = false,
                                         std::optional<double> scale = std::nullopt,
                                         bool enable_gqa = false, Generator* gen = nullptr);

}  // namespace adjoint
