// nn::Llama: a Llama-style decoder-only language model beside nn::GPT: token embedding (no
// position embedding: rotary embedding inside attention), pre-RMSNorm blocks with grouped-query
// attention on the fused kernel and a SwiGLU feed-forward, a final RMSNorm and an output head,
// tied to the embedding or not. Generation goes through per-layer key/value caches.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "adjoint/generator.h"
#include "adjoint/nn/container.h"
#include "adjoint/nn/embedding.h"
#include "adjoint/nn/language_model.h"
#include "adjoint/nn/linear.h"
#include "adjoint/nn/llama_block.h"
#include "adjoint/nn/normalization.h"

namespace adjoint::nn {

struct LlamaConfig {
  int64_t vocab = 256;    ///< number of token ids
  int64_t context = 128;  ///< longest sequence (RoPE tables, KV cache capacity)
  int64_t d_model = 256;  ///< width of the residual stream
  int64_t heads = 4;      ///< query heads; must divide d_model, with d_model / heads even
  int64_t kv_heads = 2;   ///< key/value heads; must divide heads (heads: plain multi-head)
  int64_t layers = 4;     ///< transformer blocks
  int64_t hidden = 0;     ///< SwiGLU width; 0: llama_hidden(d_model)
  double rope_base = 10000;
  double norm_eps = 1e-5;
  bool tie_embeddings = false;  ///< output head = tok_embeddings.weight (else its own Linear)
};

/// Llama's SwiGLU width rule for a model of width d: 2/3 of 4d (the same parameters as a 4d GELU
/// MLP), rounded up to a multiple of 32.
int64_t llama_hidden(int64_t d_model);

/// logits = output(norm(layers(tok_embeddings[idx]))), shape [B, T, vocab].
///
/// Parameters, in this order and with these names (Meta's):
///   tok_embeddings.weight [vocab, d]  (N(0, 0.02²), as nn::GPT's embeddings)
///   layers.{i}.attention_norm.weight, layers.{i}.attention.{wq,wk,wv,wo}.weight,
///   layers.{i}.ffn_norm.weight, layers.{i}.feed_forward.{w1,w2,w3}.weight
///   norm.weight, output.weight [vocab, d] (untied only)
/// Linear layers have libtorch's default init (U(±1/sqrt(in))), RMSNorms weight 1; no biases.
/// Tied, the head multiplies by tok_embeddings.weight, one tensor that receives both gradients.
/// Random draws come from `gen` (the default generator when null), in the order above.
class Llama : public LanguageModel {
 public:
  explicit Llama(const LlamaConfig& config, Generator* gen = nullptr);

  /// idx: [B, T] int64 token ids with T <= context; returns logits [B, T, vocab].
  Tensor forward(const Tensor& idx) override;
  /// The same for positions caches[0].length() .. of idx, one cache per layer, all of one
  /// length; each cache then holds T more positions. Generation: the prefix once, then one token
  /// at a time, each step's logits those of forward() over the whole sequence so far.
  Tensor forward(const Tensor& idx, std::vector<KVCache>& caches);
  /// One empty cache per layer, for `capacity` positions (the context when 0).
  std::vector<KVCache> make_caches(int64_t capacity = 0) const;

  int64_t context() const override { return config_.context; }
  int64_t vocab() const override { return config_.vocab; }
  const LlamaConfig& config() const { return config_; }

  std::shared_ptr<Embedding> tok_embeddings;
  std::shared_ptr<Sequential> layers;  ///< children "0" .. "layers-1", each a LlamaBlock
  std::shared_ptr<RMSNorm> norm;
  std::shared_ptr<Linear> output;  ///< null when tied

 private:
  Tensor head(const Tensor& x);
  LlamaConfig config_;
};

}  // namespace adjoint::nn
