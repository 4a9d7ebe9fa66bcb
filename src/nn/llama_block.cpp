// SwiGLU, KVCache, GroupedQueryAttention and LlamaBlock (adjoint/nn/llama_block.h). Attention
// runs on the fused scaled_dot_product_attention kernel; see Note [Causal attention with a
// cache] for the mask with a cached prefix.
#include "adjoint/nn/llama_block.h"

#include "adjoint/attention_ops.h"
#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "adjoint/transformer_ops.h"

namespace adjoint::nn {

SwiGLU::SwiGLU(int64_t d_model, int64_t hidden, Generator* gen) : Module("SwiGLU") {
  w1 = register_module("w1", std::make_shared<Linear>(d_model, hidden, false, gen));
  w2 = register_module("w2", std::make_shared<Linear>(hidden, d_model, false, gen));
  w3 = register_module("w3", std::make_shared<Linear>(d_model, hidden, false, gen));
}

Tensor SwiGLU::forward(const Tensor& x) { return (*w2)(silu((*w1)(x)) * (*w3)(x)); }

KVCache::KVCache(int64_t capacity) : capacity_(capacity) {
  ADJOINT_CHECK(capacity > 0, Value, "nn.KVCache", "capacity must be positive, got ", capacity);
}

std::pair<Tensor, Tensor> KVCache::append(const Tensor& k, const Tensor& v) {
  const char* op = "nn.KVCache";
  ADJOINT_CHECK(k.defined() && v.defined() && k.dim() == 4 && k.shape() == v.shape(), Shape, op,
                "keys and values must be [B, Hkv, T, hd] of one shape, got ",
                k.defined() ? describe(k) : "undefined", " and ",
                v.defined() ? describe(v) : "undefined");
  ADJOINT_CHECK(k.dtype() == v.dtype(), DType, op, "keys ", describe(k), " and values ",
                describe(v), " differ in dtype");
  ADJOINT_CHECK(!(is_grad_enabled() && (k.requires_grad() || v.requires_grad())), Value, op,
                "the cache is written in place and is for generation: append under NoGradGuard "
                "or InferenceMode (keys ",
                describe(k), " require grad)");
  const int64_t T = k.size(2);
  ADJOINT_CHECK(length_ + T <= capacity_, Shape, op, "appending ", T, " positions to ", length_,
                " exceeds the capacity ", capacity_);
  if (!k_.defined()) {
    const Shape shape{k.size(0), k.size(1), capacity_, k.size(3)};
    k_ = empty(shape, k.dtype());
    v_ = empty(shape, k.dtype());
  }
  ADJOINT_CHECK(k.size(0) == k_.size(0) && k.size(1) == k_.size(1) && k.size(3) == k_.size(3) &&
                    k.dtype() == k_.dtype(),
                Shape, op, "keys ", describe(k), " do not match the cached ", describe(k_));
  k_.narrow(2, length_, T).copy_(k);
  v_.narrow(2, length_, T).copy_(v);
  length_ += T;
  return {k_.narrow(2, 0, length_), v_.narrow(2, 0, length_)};
}

GroupedQueryAttention::GroupedQueryAttention(int64_t d_model, int64_t heads, int64_t kv_heads,
                                             int64_t context, double rope_base, Generator* gen)
    : Module("GroupedQueryAttention"),
      d_(d_model),
      heads_(heads),
      kv_heads_(kv_heads),
      context_(context) {
  const char* op = "nn.GroupedQueryAttention";
  ADJOINT_CHECK(d_model > 0 && heads > 0 && kv_heads > 0 && context > 0, Value, op,
                "d_model, heads, kv_heads and context must be positive, got ", d_model, ", ", heads,
                ", ", kv_heads, ", ", context);
  ADJOINT_CHECK(d_model % heads == 0, Value, op, "d_model ", d_model,
                " is not divisible by the number of heads ", heads);
  ADJOINT_CHECK(heads % kv_heads == 0, Value, op, "heads ", heads,
                " is not a multiple of kv_heads ", kv_heads);
  const int64_t hd = d_model / heads;
  ADJOINT_CHECK(hd % 2 == 0, Value, op, "the head dim d_model / heads = ", hd,
                " must be even for rotary embedding");
  wq = register_module("wq", std::make_shared<Linear>(d_model, heads * hd, false, gen));
  wk = register_module("wk", std::make_shared<Linear>(d_model, kv_heads * hd, false, gen));
  wv = register_module("wv", std::make_shared<Linear>(d_model, kv_heads * hd, false, gen));
  wo = register_module("wo", std::make_shared<Linear>(heads * hd, d_model, false, gen));
  RotaryTables tables = rotary_tables(context, hd, rope_base, 0, DType::Float64);
  rope_cos_ = tables.cos;
  rope_sin_ = tables.sin;
}

Tensor GroupedQueryAttention::forward(const Tensor& x) { return forward(x, nullptr); }

// Note [Causal attention with a cache]
// With P cached positions, query i of the new T sits at position P + i and may see keys
// 0 .. P + i: the causal mask aligned to the bottom right of the [T, P + T] scores. The fused
// op's is_causal aligns to the top left (PyTorch's convention), which is the same only when
// P = 0. So: P = 0 is is_causal; T = 1 (one generated token) needs no mask at all, it sees every
// key; anything else gets the bool mask key <= P + i.
Tensor GroupedQueryAttention::forward(const Tensor& x, KVCache* cache) {
  const char* op = "nn.GroupedQueryAttention";
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(x.dim() == 3 && x.size(2) == d_, Shape, op, "expected input [B, T, ", d_, "], got ",
                describe(x));
  const int64_t B = x.size(0), T = x.size(1), hd = head_dim();
  const int64_t P = cache ? cache->length() : 0;
  ADJOINT_CHECK(P + T <= context_, Shape, op, "positions ", P, " .. ", P + T - 1,
                " exceed the context ", context_, " (input ", describe(x), ", ", P, " cached)");
  auto heads_of = [&](const Tensor& y, int64_t h) {
    return y.view({B, T, h, hd}).transpose(1, 2);  // [B, h, T, hd]
  };
  Tensor q = heads_of((*wq)(x), heads_);
  Tensor k = heads_of((*wk)(x), kv_heads_);
  Tensor v = heads_of((*wv)(x), kv_heads_);
  // The tables in the projections' dtype, which under autocast is the low one, not x's.
  const Tensor cos = adjoint::to(rope_cos_.narrow(0, P, T), q.dtype());
  const Tensor sin = adjoint::to(rope_sin_.narrow(0, P, T), q.dtype());
  q = apply_rotary_embedding(q, cos, sin);
  k = apply_rotary_embedding(k, cos, sin);
  if (cache) std::tie(k, v) = cache->append(k, v);
  const bool gqa = kv_heads_ != heads_;
  Tensor y;
  if (P == 0 || T == 1) {
    y = scaled_dot_product_attention(q, k, v, {}, 0, P == 0, std::nullopt, gqa);
  } else {
    const Tensor key_pos = arange(P + T).unsqueeze(0);      // [1, P + T]
    const Tensor query_pos = (arange(T) + P).unsqueeze(1);  // [T, 1]
    y = scaled_dot_product_attention(q, k, v, le(key_pos, query_pos), 0, false, std::nullopt, gqa);
  }
  return (*wo)(y.transpose(1, 2).reshape({B, T, heads_ * hd}));
}

LlamaBlock::LlamaBlock(int64_t d_model, int64_t heads, int64_t kv_heads, int64_t hidden,
                       int64_t context, double rope_base, double norm_eps, Generator* gen)
    : Module("LlamaBlock") {
  attention_norm = register_module("attention_norm", std::make_shared<RMSNorm>(d_model, norm_eps));
  attention = register_module("attention", std::make_shared<GroupedQueryAttention>(
                                               d_model, heads, kv_heads, context, rope_base, gen));
  ffn_norm = register_module("ffn_norm", std::make_shared<RMSNorm>(d_model, norm_eps));
  feed_forward = register_module("feed_forward", std::make_shared<SwiGLU>(d_model, hidden, gen));
}

Tensor LlamaBlock::forward(const Tensor& x) { return forward(x, nullptr); }

Tensor LlamaBlock::forward(const Tensor& x, KVCache* cache) {
  // Without a cache through operator(), so that hooks on the attention module fire in training.
  const Tensor a = (*attention_norm)(x);
  Tensor h = x + (cache ? attention->forward(a, cache) : (*attention)(a));
  return h + (*feed_forward)((*ffn_norm)(h));
}

}  // namespace adjoint::nn
