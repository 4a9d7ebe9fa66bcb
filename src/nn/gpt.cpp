// nn::GPT: embeddings, blocks, final LayerNorm and the tied output head, plus the loss.
#include "adjoint/nn/gpt.h"

#include "adjoint/error.h"
#include "adjoint/ops.h"

namespace adjoint::nn {

GPT::GPT(const GPTConfig& config, Generator* gen) : Module("GPT"), config_(config) {
  const char* op = "nn.GPT";
  ADJOINT_CHECK(config.vocab > 0 && config.context > 0 && config.d_model > 0 && config.heads > 0 &&
                    config.layers >= 0,
                Value, op, "sizes must be positive: vocab ", config.vocab, ", context ",
                config.context, ", d_model ", config.d_model, ", heads ", config.heads, ", layers ",
                config.layers);
  ADJOINT_CHECK(config.d_model % config.heads == 0, Value, op, "d_model ", config.d_model,
                " is not divisible by heads ", config.heads);
  ADJOINT_CHECK(config.dropout >= 0 && config.dropout < 1, Value, op,
                "dropout must be in [0, 1), got ", config.dropout);
  Generator& g = gen ? *gen : default_generator();
  const int64_t d = config.d_model;
  wte = register_module("wte", std::make_shared<Embedding>(config.vocab, d, &g, 0.02));
  wpe = register_module("wpe", std::make_shared<Embedding>(config.context, d, &g, 0.02));
  drop = register_module("drop", std::make_shared<Dropout>(config.dropout, &g));
  blocks = register_module("blocks", std::make_shared<Sequential>());
  for (int64_t i = 0; i < config.layers; ++i)
    blocks->push_back(std::make_shared<Block>(d, config.heads, config.context, config.dropout, &g));
  ln_f = register_module("ln_f", std::make_shared<LayerNorm>(d));
}

Tensor GPT::forward(const Tensor& idx) {
  const char* op = "nn.GPT";
  ADJOINT_CHECK(idx.defined(), Value, op, "got undefined token ids");
  ADJOINT_CHECK(idx.dtype() == DType::Int64, DType, op, "token ids must be int64, got ",
                describe(idx));
  ADJOINT_CHECK(idx.dim() == 2, Shape, op, "token ids must be [B, T], got ", describe(idx));
  const int64_t T = idx.size(1);
  ADJOINT_CHECK(T <= config_.context, Shape, op, "sequence length ", T, " exceeds the context ",
                config_.context, ": ", describe(idx));
  // Positions 0..T-1 are the first T rows of wpe: a view, not an embedding lookup (whose
  // backward would scatter into a zero [context, d] tensor).
  const Tensor pos = T == config_.context ? wpe->weight : wpe->weight.narrow(0, 0, T);
  Tensor x = (*drop)((*wte)(idx) + pos);  // [B, T, d], pos broadcast over B
  x = (*ln_f)(run_blocks ? run_blocks(*blocks, x) : (*blocks)(x));
  // The tied head: x wteᵀ as one linear op (no bias, no copy of the transpose).
  return linear(x, wte->weight);
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets) {
  const char* op = "nn.GPT";
  ADJOINT_CHECK(targets.defined(), Value, op, "got undefined targets");
  ADJOINT_CHECK(targets.dtype() == DType::Int64, DType, op, "targets must be int64, got ",
                describe(targets));
  ADJOINT_CHECK(idx.defined() && targets.shape() == idx.shape(), Shape, op, "targets ",
                describe(targets), " must have the shape of the token ids ", describe(idx));
  Tensor logits = (*this)(idx);  // with the model's own hooks, as a call of model(idx)
  const int64_t rows = idx.numel();
  return cross_entropy(logits.reshape({rows, config_.vocab}), targets.reshape({rows}));
}

}  // namespace adjoint::nn
