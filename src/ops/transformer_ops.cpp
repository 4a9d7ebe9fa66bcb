// rms_norm and rotary embedding (adjoint/transformer_ops.h), written with differentiable ops:
// neither has a rule or kernel of its own (see Note [Composite Llama ops]).
#include "adjoint/transformer_ops.h"

#include <cmath>
#include <vector>

#include "adjoint/error.h"
#include "adjoint/ops.h"

namespace adjoint {

// Note [Composite Llama ops]
// DESIGN.md §2: a composite gets its own rule only when a fused kernel is measurably faster or
// more stable. RMSNorm is a square, a mean, an rsqrt and two products over rows of d_model; in
// adjoint-train's default Llama step they take about 5 % of the step, forward and backward
// (docs/attention.md, "The Llama block"), which bounds what a fused kernel could win, so the
// composite stays, and with it every derivative order, vmap and compile for free. RoPE is two
// products and a sum of views (about 5 % too): a kernel would save the half-size copies of
// rotate_half and the products' temporaries, no more.

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  const char* op = "rms_norm";
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(is_floating(x.dtype()), DType, op, "input must be floating point, got ",
                describe(x));
  ADJOINT_CHECK(x.dim() >= 1, Shape, op, "input needs at least 1 dim, got ", describe(x));
  ADJOINT_CHECK(eps >= 0, Value, op, "eps must be non-negative, got ", eps);
  if (weight.defined())
    ADJOINT_CHECK(weight.dim() == 1 && weight.size(0) == x.size(-1), Shape, op, "weight ",
                  describe(weight), " must be [", x.size(-1), "] for input ", describe(x));
  // 16-bit inputs: the mean of squares in float32 (bfloat16's 8 bits would round it coarsely),
  // as Llama's reference normalises in float32 and rounds back before the weight.
  const DType dtype = x.dtype();
  const Tensor xf = is_reduced_float(dtype) ? to(x, DType::Float32) : x;
  Tensor y = xf * rsqrt(mean(square(xf), {-1}, true) + eps);
  if (y.dtype() != dtype) y = to(y, dtype);
  return weight.defined() ? y * weight : y;
}

RotaryTables rotary_tables(int64_t positions, int64_t head_dim, double base, int64_t offset,
                           DType dtype) {
  const char* op = "rotary_tables";
  ADJOINT_CHECK(positions >= 0 && offset >= 0, Value, op,
                "positions and offset must be non-negative, got ", positions, " and ", offset);
  ADJOINT_CHECK(head_dim > 0 && head_dim % 2 == 0, Value, op,
                "head_dim must be positive and even, got ", head_dim);
  ADJOINT_CHECK(base > 0, Value, op, "base must be positive, got ", base);
  ADJOINT_CHECK(is_floating(dtype), DType, op, "tables must be floating point, got ",
                to_string(dtype));
  const int64_t half = head_dim / 2;
  std::vector<double> c(positions * head_dim), s(positions * head_dim);
  for (int64_t t = 0; t < positions; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const double inv_freq = std::pow(base, -2.0 * static_cast<double>(i) / head_dim);
      const double angle = static_cast<double>(offset + t) * inv_freq;
      // both halves of a row use frequency i (HF's cat(freqs, freqs))
      c[t * head_dim + i] = c[t * head_dim + i + half] = std::cos(angle);
      s[t * head_dim + i] = s[t * head_dim + i + half] = std::sin(angle);
    }
  const Shape shape{positions, head_dim};
  return {to(tensor(c, shape), dtype), to(tensor(s, shape), dtype)};
}

Tensor apply_rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const char* op = "apply_rotary_embedding";
  ADJOINT_CHECK(x.defined() && cos.defined() && sin.defined(), Value, op,
                "got an undefined tensor");
  ADJOINT_CHECK(x.dim() >= 2, Shape, op, "input must be [..., T, D], got ", describe(x));
  const int64_t T = x.size(-2), D = x.size(-1);
  ADJOINT_CHECK(D % 2 == 0, Shape, op, "the head dim must be even, got ", describe(x));
  ADJOINT_CHECK(cos.shape() == (Shape{T, D}) && sin.shape() == (Shape{T, D}), Shape, op,
                "tables must be [", T, ", ", D, "] for input ", describe(x), ", got cos ",
                describe(cos), " and sin ", describe(sin));
  ADJOINT_CHECK(is_floating(x.dtype()) && cos.dtype() == x.dtype() && sin.dtype() == x.dtype(),
                DType, op, "input and tables must share a floating dtype: input ", describe(x),
                ", cos ", describe(cos), ", sin ", describe(sin));
  // rotate_half(x) = cat(-x2, x1): the pair partner of each element, with the sign of sin.
  const int64_t half = D / 2;
  const Tensor rotated = cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

Tensor rotary_embedding(const Tensor& x, int64_t offset, double base) {
  ADJOINT_CHECK(x.defined() && x.dim() >= 2, Shape, "rotary_embedding",
                "input must be [..., T, D], got ", x.defined() ? describe(x) : "undefined");
  const RotaryTables tables = rotary_tables(x.size(-2), x.size(-1), base, offset, x.dtype());
  return apply_rotary_embedding(x, tables.cos, tables.sin);
}

}  // namespace adjoint
