// nn::CausalSelfAttention. q, k and v are the three row blocks of the qkv layer applied
// separately (see Note [Attention projections]); every reshaping step after that is a view
// ([B, T, d] seen as [B, T, H, hd] and transposed to [B, H, T, hd]: the batched gemm reads the
// strides directly). The only copy is merging the heads back into [B, T, d] for proj, which
// needs contiguous rows.
#include "adjoint/nn/attention.h"

#include <cmath>

#include "adjoint/attention_ops.h"
#include "adjoint/error.h"
#include "adjoint/ops.h"

namespace adjoint::nn {

CausalSelfAttention::CausalSelfAttention(int64_t d_model, int64_t heads, int64_t context,
                                         double dropout, Generator* gen)
    : Module("CausalSelfAttention"), d_(d_model), heads_(heads), context_(context) {
  const char* op = "nn.CausalSelfAttention";
  ADJOINT_CHECK(d_model > 0 && heads > 0, Value, op, "d_model and heads must be positive, got ",
                d_model, " and ", heads);
  ADJOINT_CHECK(d_model % heads == 0, Value, op, "d_model ", d_model,
                " is not divisible by the number of heads ", heads);
  ADJOINT_CHECK(context > 0, Value, op, "context must be positive, got ", context);
  qkv = register_module("qkv", std::make_shared<Linear>(d_model, 3 * d_model, true, gen));
  proj = register_module("proj", std::make_shared<Linear>(d_model, d_model, true, gen));
  attn_drop = register_module("attn_drop", std::make_shared<Dropout>(dropout, gen));
  resid_drop = register_module("resid_drop", std::make_shared<Dropout>(dropout, gen));
  // mask[i][j] = j > i: query i must not see key j from its future
  Tensor pos = arange(context);
  mask = register_buffer("mask", gt(pos.unsqueeze(0), pos.unsqueeze(1)));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  const char* op = "nn.CausalSelfAttention";
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(x.dim() == 3 && x.size(2) == d_, Shape, op, "expected input [B, T, ", d_, "], got ",
                describe(x));
  const int64_t B = x.size(0), T = x.size(1), hd = d_ / heads_;
  ADJOINT_CHECK(T <= context_, Shape, op, "sequence length ", T, " exceeds the context ", context_,
                " the mask was built for: ", describe(x));

  // Note [Attention projections]
  // q | k | v = split(qkv(x)) is computed as three linear ops on views of qkv's weight and
  // bias rows [i d, (i + 1) d): the same products, same FLOPs. Split outputs would each send
  // back a gradient scattered into zeros of the whole [B, T, 3d] output, and the engine would
  // add the three; this way backward only sums three [B, T, d] input gradients and scatters
  // the small [d, d] weight blocks.
  auto project = [&](int64_t i, double scale) {
    Tensor w = qkv->weight.narrow(0, i * d_, d_);
    Tensor b = qkv->bias.defined() ? qkv->bias.narrow(0, i * d_, d_) : Tensor();
    if (scale != 1) {
      w = w * scale;
      if (b.defined()) b = b * scale;
    }
    return linear(x, w, b).view({B, T, heads_, hd}).transpose(1, 2);  // [B, H, T, hd]
  };
  // The 1/sqrt(hd) of the scores is folded into q's weight and bias rows (d·d + d elements)
  // rather than applied to the scores (B·H·T·T) or to q (B·T·d): the same product with less
  // work. 1/sqrt(hd) is a power of two for the usual head sizes, so it is even bitwise the
  // same.
  Tensor q = project(0, 1.0 / std::sqrt(static_cast<double>(hd)));
  Tensor k = project(1, 1);
  Tensor v = project(2, 1);

  if (fused) {
    // The scale is already in q: scale 1.
    const double p = is_training() ? attn_drop->p() : 0.0;
    Tensor y = scaled_dot_product_attention(q, k, v, {}, p, true, 1.0, false,
                                            p > 0 ? &attn_drop->generator() : nullptr);
    return (*resid_drop)((*proj)(y.transpose(1, 2).reshape({B, T, d_})));
  }
  Tensor scores = matmul(q, k.transpose(-2, -1));  // [B, H, T, T]
  const Tensor m = T == context_ ? mask : mask.slice(0, 0, T).slice(1, 0, T);
  // softmax(masked_fill(scores, mask, -inf)) in one op: no -inf pass over the scores and no
  // mask pass over their gradient, and the masked half of each row is never exponentiated.
  Tensor att = (*attn_drop)(masked_softmax(scores, m, -1));
  Tensor y = matmul(att, v).transpose(1, 2).reshape({B, T, d_});  // heads concatenated in order
  return (*resid_drop)((*proj)(y));
}

}  // namespace adjoint::nn
