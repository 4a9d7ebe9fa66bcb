// nn::CausalSelfAttention: multi-head self-attention with a causal mask, written as plain
// matmul / mask / softmax / matmul, as in GPT-2, or (opt-in) on the fused kernel.
#pragma once

#include <cstdint>
#include <memory>

#include "adjoint/generator.h"
#include "adjoint/nn/dropout.h"
#include "adjoint/nn/linear.h"
#include "adjoint/nn/module.h"

namespace adjoint::nn {

/// For x of shape [B, T, d]:
///   q | k | v = split(qkv(x), d, last dim), each seen as [B, H, T, d/H]
///   a = softmax(masked_fill(q kᵀ / sqrt(d/H), mask[:T, :T], -inf)), then attn dropout
///   y = proj(a v with the heads concatenated back to [B, T, d]), then resid dropout
/// where mask[i][j] = (j > i), so position i attends to positions <= i only.
/// Children "qkv" = Linear(d, 3d) and "proj" = Linear(d, d) (then "attn_drop" and
/// "resid_drop"); buffer "mask", a [context, context] bool tensor built once. T may be at
/// most `context`.
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(int64_t d_model, int64_t heads, int64_t context, double dropout = 0,
                      Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;

  int64_t d_model() const { return d_; }
  int64_t heads() const { return heads_; }
  int64_t context() const { return context_; }

  std::shared_ptr<Linear> qkv;
  std::shared_ptr<Linear> proj;
  std::shared_ptr<Dropout> attn_drop;
  std::shared_ptr<Dropout> resid_drop;
  Tensor mask;  ///< [context, context] bool, true above the diagonal (the future)
  /// Opt-in: softmax and the products run as one scaled_dot_product_attention op (is_causal;
  /// attn_drop's p while training, drawn by that op from attn_drop's generator, so the same
  /// distribution but not the same elements as Dropout's), which keeps no [B, H, T, T] tensor
  /// for backward. Off by default; docs/attention.md has the measurements.
  bool fused = false;

 private:
  int64_t d_, heads_, context_;
};

}  // namespace adjoint::nn
