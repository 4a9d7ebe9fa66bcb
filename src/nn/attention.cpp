// nn::CausalSelfAttention. Every reshaping step is a view: the qkv output [B, T, 3d] is seen
// as [B, T, 3, H, hd] and q, k, v are selected and transposed to [B, H, T, hd] without a copy
// (the batched gemm reads their strides directly). The only copy is merging the heads back
// into [B, T, d] for proj, which needs contiguous rows.
#include "adjoint/nn/attention.h"

#include <cmath>
#include <limits>

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

  Tensor parts = qkv->forward(x).view({B, T, 3, heads_, hd});
  // Scaling q (B·H·T·hd elements) rather than the scores (B·H·T·T) is the same product with
  // less work whenever hd < T; 1/sqrt(hd) is a power of two for the usual head sizes, so it
  // is even bitwise the same.
  Tensor q = parts.select(2, 0).transpose(1, 2) * (1.0 / std::sqrt(static_cast<double>(hd)));
  Tensor k = parts.select(2, 1).transpose(1, 2);
  Tensor v = parts.select(2, 2).transpose(1, 2);

  Tensor scores = matmul(q, k.transpose(-2, -1));  // [B, H, T, T]
  const Tensor m = T == context_ ? mask : mask.slice(0, 0, T).slice(1, 0, T);
  scores = masked_fill(scores, m, -std::numeric_limits<double>::infinity());
  Tensor att = attn_drop->forward(softmax(scores, -1));
  Tensor y = matmul(att, v).transpose(1, 2).reshape({B, T, d_});  // heads concatenated in order
  return resid_drop->forward(proj->forward(y));
}

}  // namespace adjoint::nn
