// FeedForward and Block: the GPT-2 transformer block, pre-LayerNorm with residuals.
#include "adjoint/nn/transformer.h"

#include "adjoint/ops.h"

namespace adjoint::nn {

FeedForward::FeedForward(int64_t d_model, int64_t hidden, double dropout, Generator* gen)
    : Module("FeedForward") {
  fc = register_module("fc", std::make_shared<Linear>(d_model, hidden, true, gen));
  fc_out = register_module("fc_out", std::make_shared<Linear>(hidden, d_model, true, gen));
  drop = register_module("drop", std::make_shared<Dropout>(dropout, gen));
}

Tensor FeedForward::forward(const Tensor& x) {
  return (*drop)((*fc_out)(gelu((*fc)(x), GeluApproximation::Tanh)));
}

Block::Block(int64_t d_model, int64_t heads, int64_t context, double dropout, Generator* gen)
    : Module("Block") {
  ln1 = register_module("ln1", std::make_shared<LayerNorm>(d_model));
  attn = register_module(
      "attn", std::make_shared<CausalSelfAttention>(d_model, heads, context, dropout, gen));
  ln2 = register_module("ln2", std::make_shared<LayerNorm>(d_model));
  mlp = register_module("mlp", std::make_shared<FeedForward>(d_model, 4 * d_model, dropout, gen));
}

Tensor Block::forward(const Tensor& x) {
  Tensor h = x + (*attn)((*ln1)(x));
  return h + (*mlp)((*ln2)(h));
}

}  // namespace adjoint::nn
