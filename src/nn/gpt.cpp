// nn::GPT: embeddings, blocks, final LayerNorm and the tied output head (the loss is
// LanguageModel's).
#include "adjoint/nn/gpt.h"

#include "adjoint/error.h"
#include "adjoint/ops.h"

namespace adjoint::nn {

GPT::GPT(const GPTConfig& config, Generator* gen) : LanguageModel("GPT"), config_(config) {
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
  check_ids(idx, "nn.GPT");
  const int64_t T = idx.size(1);
  // Positions 0..T-1 are the first T rows of wpe: a view, not an embedding lookup (whose
  // backward would scatter into a zero [context, d] tensor).
  const Tensor pos = T == config_.context ? wpe->weight : wpe->weight.narrow(0, 0, T);
  Tensor x = (*drop)((*wte)(idx) + pos);  // [B, T, d], pos broadcast over B
  x = (*ln_f)(run_blocks ? run_blocks(*blocks, x) : (*blocks)(x));
  // The tied head: x wteᵀ as one linear op (no bias, no copy of the transpose).
  return linear(x, wte->weight);
}

}  // namespace adjoint::nn
