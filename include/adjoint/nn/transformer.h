// The transformer block of GPT: FeedForward (the position-wise MLP) and Block (pre-LayerNorm
// attention and MLP, each around a residual connection).
#pragma once

#include <cstdint>
#include <memory>

#include "adjoint/generator.h"
#include "adjoint/nn/attention.h"
#include "adjoint/nn/dropout.h"
#include "adjoint/nn/linear.h"
#include "adjoint/nn/module.h"
#include "adjoint/nn/normalization.h"

namespace adjoint::nn {

/// fc_out(gelu_tanh(fc(x))) then dropout, with fc = Linear(d, hidden) and
/// fc_out = Linear(hidden, d) (hidden = 4d in GPT). Children "fc", "fc_out", "drop".
class FeedForward : public Module {
 public:
  FeedForward(int64_t d_model, int64_t hidden, double dropout = 0, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> fc;
  std::shared_ptr<Linear> fc_out;
  std::shared_ptr<Dropout> drop;
};

/// Pre-LayerNorm transformer block:
///   x = x + attn(ln1(x));  x = x + mlp(ln2(x))
/// Children, in order: "ln1", "attn" (CausalSelfAttention), "ln2", "mlp" (FeedForward with
/// hidden = 4 d). LayerNorms use eps 1e-5.
class Block : public Module {
 public:
  Block(int64_t d_model, int64_t heads, int64_t context, double dropout = 0,
        Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<LayerNorm> ln1;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<LayerNorm> ln2;
  std::shared_ptr<FeedForward> mlp;
};

}  // namespace adjoint::nn
