// nn::Llama: construction with its checks, the forward with and without the caches, the head.
#include "adjoint/nn/llama.h"

#include "adjoint/error.h"
#include "adjoint/ops.h"

namespace adjoint::nn {

int64_t llama_hidden(int64_t d_model) {
  const int64_t h = (8 * d_model + 2) / 3;  // ceil(2/3 of 4d)
  return (h + 31) / 32 * 32;
}

Llama::Llama(const LlamaConfig& config, Generator* gen) : LanguageModel("Llama"), config_(config) {
  const char* op = "nn.Llama";
  ADJOINT_CHECK(config.vocab > 0 && config.context > 0 && config.d_model > 0 && config.heads > 0 &&
                    config.kv_heads > 0 && config.layers >= 0 && config.hidden >= 0,
                Value, op, "sizes must be positive: vocab ", config.vocab, ", context ",
                config.context, ", d_model ", config.d_model, ", heads ", config.heads,
                ", kv_heads ", config.kv_heads, ", layers ", config.layers, ", hidden ",
                config.hidden);
  ADJOINT_CHECK(config.d_model % config.heads == 0, Value, op, "d_model ", config.d_model,
                " is not divisible by heads ", config.heads);
  ADJOINT_CHECK(config.heads % config.kv_heads == 0, Value, op, "heads ", config.heads,
                " is not a multiple of kv_heads ", config.kv_heads);
  Generator& g = gen ? *gen : default_generator();
  const int64_t d = config.d_model;
  if (config_.hidden == 0) config_.hidden = llama_hidden(d);
  tok_embeddings =
      register_module("tok_embeddings", std::make_shared<Embedding>(config.vocab, d, &g, 0.02));
  layers = register_module("layers", std::make_shared<Sequential>());
  for (int64_t i = 0; i < config.layers; ++i)
    layers->push_back(std::make_shared<LlamaBlock>(d, config.heads, config.kv_heads, config_.hidden,
                                                   config.context, config.rope_base,
                                                   config.norm_eps, &g));
  norm = register_module("norm", std::make_shared<RMSNorm>(d, config.norm_eps));
  if (!config.tie_embeddings)
    output = register_module("output", std::make_shared<Linear>(d, config.vocab, false, &g));
}

Tensor Llama::head(const Tensor& x) {
  // Tied: x Eᵀ as one linear op (no copy of the transpose).
  return output ? (*output)(x) : linear(x, tok_embeddings->weight);
}

Tensor Llama::forward(const Tensor& idx) {
  check_ids(idx, "nn.Llama");
  Tensor x = (*tok_embeddings)(idx);  // [B, T, d]
  return head((*norm)(run_blocks ? run_blocks(*layers, x) : (*layers)(x)));
}

Tensor Llama::forward(const Tensor& idx, std::vector<KVCache>& caches) {
  const char* op = "nn.Llama";
  ADJOINT_CHECK(static_cast<int64_t>(caches.size()) == config_.layers, Value, op, "got ",
                caches.size(), " caches for ", config_.layers, " layers");
  for (const KVCache& c : caches)
    ADJOINT_CHECK(c.length() == caches[0].length(), Value, op,
                  "the layers' caches differ in length: ", c.length(), " and ", caches[0].length());
  ADJOINT_CHECK(idx.defined() && idx.dim() == 2, Shape, op, "token ids must be [B, T], got ",
                idx.defined() ? describe(idx) : "undefined");
  const int64_t P = caches.empty() ? 0 : caches[0].length();
  ADJOINT_CHECK(P + idx.size(1) <= config_.context, Shape, op, "positions ", P, " .. ",
                P + idx.size(1) - 1, " exceed the context ", config_.context);
  check_ids(idx, op);
  Tensor x = (*tok_embeddings)(idx);
  for (std::size_t i = 0; i < caches.size(); ++i)
    x = layers->at<LlamaBlock>(i)->forward(x, &caches[i]);
  return head((*norm)(x));
}

std::vector<KVCache> Llama::make_caches(int64_t capacity) const {
  return std::vector<KVCache>(config_.layers, KVCache(capacity > 0 ? capacity : config_.context));
}

}  // namespace adjoint::nn
