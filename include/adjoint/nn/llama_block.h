// The Llama transformer block and its parts: the SwiGLU feed-forward, grouped-query
// self-attention with rotary embeddings on the fused attention kernel, the per-layer key/value
// cache of generation, and the pre-RMSNorm block. The model is in llama.h; the functional
// pieces (rms_norm, RoPE) in adjoint/transformer_ops.h; docs/attention.md, "The Llama block".
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "adjoint/generator.h"
#include "adjoint/nn/linear.h"
#include "adjoint/nn/module.h"
#include "adjoint/nn/normalization.h"

namespace adjoint::nn {

/// w2(silu(w1(x)) * w3(x)): w1 (gate) and w3 (up) Linear(d, hidden), w2 (down)
/// Linear(hidden, d), none with a bias. Children "w1", "w2", "w3" (Meta's names), created in
/// the order w1, w2, w3 (the order of their draws from `gen`).
class SwiGLU : public Module {
 public:
  SwiGLU(int64_t d_model, int64_t hidden, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<Linear> w1;
  std::shared_ptr<Linear> w2;
  std::shared_ptr<Linear> w3;
};

/// One layer's keys and values of the positions generated so far, [B, Hkv, length, hd] each
/// (after RoPE), in storage for `capacity` positions allocated at the first append. It is for
/// generation: appending writes the storage in place, so it runs with no gradient (NoGradGuard or
/// InferenceMode); an append with gradient recording on and an input that requires grad is an
/// error.
class KVCache {
 public:
  explicit KVCache(int64_t capacity);

  /// Writes k and v ([B, Hkv, T, hd]) at positions length() .. length() + T - 1 and returns the
  /// keys and values of all positions 0 .. length() + T - 1 (views of the storage). Throws
  /// naming nn.KVCache when they do not fit or do not match what is cached.
  std::pair<Tensor, Tensor> append(const Tensor& k, const Tensor& v);
  /// Positions cached: RoPE's offset for the next tokens.
  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  /// Forgets the positions (keeps the storage).
  void clear() { length_ = 0; }

 private:
  int64_t capacity_;
  int64_t length_ = 0;
  Tensor k_, v_;  // [B, Hkv, capacity, hd], undefined before the first append
};

/// Causal self-attention with grouped-query heads and rotary position embedding, for x [B, T, d]:
///   q = rope(wq(x) as [B, H, T, hd]),  k = rope(wk(x) as [B, Hkv, T, hd]),  v = wv(x) likewise
///   y = wo(scaled_dot_product_attention(q, k, v, causal, enable_gqa) heads merged)
/// with hd = d / H and H a multiple of Hkv (query head h reads key/value head h / (H / Hkv)).
/// Children "wq" [H hd, d], "wk" and "wv" [Hkv hd, d], "wo" [d, H hd], no biases. RoPE uses
/// the half-rotated pairing and `rope_base` (apply_rotary_embedding); its tables for the
/// `context` positions are built once, in float64, and rounded to x's dtype at use.
class GroupedQueryAttention : public Module {
 public:
  GroupedQueryAttention(int64_t d_model, int64_t heads, int64_t kv_heads, int64_t context,
                        double rope_base = 10000, Generator* gen = nullptr);
  /// Positions 0 .. T-1, T <= context.
  Tensor forward(const Tensor& x) override;
  /// With a cache of P positions, x holds positions P .. P + T - 1 (RoPE's offset is P) and
  /// attends to the cached keys and its own, causally; the cache then holds P + T positions.
  /// P + T <= context. A null cache is forward(x).
  Tensor forward(const Tensor& x, KVCache* cache);

  int64_t d_model() const { return d_; }
  int64_t heads() const { return heads_; }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return d_ / heads_; }
  int64_t context() const { return context_; }

  std::shared_ptr<Linear> wq;
  std::shared_ptr<Linear> wk;
  std::shared_ptr<Linear> wv;
  std::shared_ptr<Linear> wo;

 private:
  int64_t d_, heads_, kv_heads_, context_;
  Tensor rope_cos_, rope_sin_;  // [context, hd], float64
};

/// Llama's pre-RMSNorm block:
///   h = x + attention(attention_norm(x));  out = h + feed_forward(ffn_norm(h))
/// Children, in order: "attention_norm" (RMSNorm), "attention" (GroupedQueryAttention),
/// "ffn_norm" (RMSNorm), "feed_forward" (SwiGLU with `hidden`).
class LlamaBlock : public Module {
 public:
  LlamaBlock(int64_t d_model, int64_t heads, int64_t kv_heads, int64_t hidden, int64_t context,
             double rope_base = 10000, double norm_eps = 1e-5, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  /// The block on positions cache->length() .. of x, appending to the cache (see
  /// GroupedQueryAttention::forward).
  Tensor forward(const Tensor& x, KVCache* cache);

  std::shared_ptr<RMSNorm> attention_norm;
  std::shared_ptr<GroupedQueryAttention> attention;
  std::shared_ptr<RMSNorm> ffn_norm;
  std::shared_ptr<SwiGLU> feed_forward;
};

}  // namespace adjoint::nn
