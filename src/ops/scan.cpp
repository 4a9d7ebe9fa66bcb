// Scans along one dim: cumsum, cumprod and the first-order linear recurrence
// h_k = a_k h_{k-1} + b_k that both scans' derivatives are written with (kernels in
// src/backend/cpu/scan.cpp). See Note [Scan rules].
#include <algorithm>
#include <array>

#include "adjoint/error.h"
#include "core/op_fields.h"
#include "ops/common.h"

namespace adjoint {
namespace {

// Note [Scan rules]
// Along the scan's order (first to last, or last to first when `reverse`), write t_{k-1} for
// the element before k and t_{k+1} for the one after (`earlier` and `later`, which put `fill`
// where there is none).
// - cumsum: y = S x is linear, so its VJP is the scan the other way, cumsum(g, !reverse), and
//   its JVP cumsum(t).
// - linear_recurrence: h_k = a_k h_{k-1} + b_k. A cotangent g reaches h_k directly and through
//   h_{k+1}, so λ_k = g_k + a_{k+1} λ_{k+1}: the recurrence the other way with coefficients
//   later(a). Then d b = λ and d a = λ earlier(h). Forward, th_k = a_k th_{k-1} +
//   (ta_k h_{k-1} + tb_k): the same recurrence with input ta earlier(h) + tb.
// - cumprod: y_k = x_k y_{k-1}, a recurrence with b = 0 started at 1. With E = earlier(y, 1)
//   (the product before k), d x_k = E_k Σ_{i>=k} g_i x_{k+1} ... x_i = E_k λ_k, λ the reverse
//   recurrence of g with coefficients later(x): exact where x has zeros, with no division (as
//   prod's gradient, Note [Prod gradient without division]). Forward, ty = the recurrence of
//   tx E with coefficients x.
// Every rule is ops (the recurrence, shifts, products), so each differentiates again.

// t one place along `dim` in the scan's order: each element replaced by the one before it
// (`before`) or after it, with `fill` where there is none.
Tensor shifted(const Tensor& t, int64_t dim, bool reverse, bool before, double fill) {
  const int64_t n = t.size(dim);
  if (n == 0) return t;
  const Tensor edge = full_like(t.narrow(dim, 0, 1), fill);
  // "Before" in the forward order is the lower index; in the reverse order the higher one.
  const bool from_front = before != reverse;
  return from_front ? cat({edge, t.narrow(dim, 0, n - 1)}, dim)
                    : cat({t.narrow(dim, 1, n - 1), edge}, dim);
}
Tensor earlier(const Tensor& t, int64_t dim, bool reverse, double fill) {
  return shifted(t, dim, reverse, true, fill);
}
Tensor later(const Tensor& t, int64_t dim, bool reverse, double fill) {
  return shifted(t, dim, reverse, false, fill);
}

struct LinearRecurrence {
  static constexpr const char* name = "linear_recurrence";
  auto fields() { return std::tie(dim, reverse); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::InputsAndOutput;
  int64_t dim;  // wrapped
  bool reverse = false;
  Tensor forward(const Tensor& a, const Tensor& b) const {
    return kernels::linear_recurrence(a, b, dim, reverse);
  }
  // λ = recurrence(later(a), g) the other way; d a = λ earlier(h), d b = λ
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& g) const {
    const Tensor lambda =
        apply(LinearRecurrence{dim, !reverse}, later(c.input(0), dim, reverse, 0.0), g);
    std::array<Tensor, 2> out;
    if (c.needs_grad(0)) out[0] = lambda * earlier(c.output(), dim, reverse, 0.0);
    if (c.needs_grad(1)) out[1] = lambda;
    return out;
  }
  // th = recurrence(a, ta earlier(h) + tb)
  Tensor jvp(const Ctx& c, const Tensor& ta, const Tensor& tb) const {
    return apply(*this, c.input(0), ta * earlier(c.output(), dim, reverse, 0.0) + tb);
  }
  Tensor vmap(const BatchArgs& b) const {
    return apply(LinearRecurrence{dim + 1, reverse}, b.with_batch(0), b.with_batch(1));
  }
};

Tensor recurrence(const Tensor& a, const Tensor& b, int64_t dim, bool reverse) {
  return apply(LinearRecurrence{dim, reverse}, a, b);
}

struct Cumsum {
  static constexpr const char* name = "cumsum";
  auto fields() { return std::tie(dim, reverse); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::None;
  int64_t dim;  // wrapped
  bool reverse = false;
  Tensor forward(const Tensor& x) const { return kernels::cumsum(x, dim, reverse); }
  // d/dx: the sum of g over the elements at and after k, the scan the other way
  Tensor vjp(const Ctx&, const Tensor& g) const { return apply(Cumsum{dim, !reverse}, g); }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return apply(*this, tx); }
  Tensor vmap(const BatchArgs& b) const { return apply(Cumsum{dim + 1, reverse}, b[0]); }
};

struct Cumprod {
  static constexpr const char* name = "cumprod";
  auto fields() { return std::tie(dim, reverse); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::InputsAndOutput;
  int64_t dim;  // wrapped
  bool reverse = false;
  Tensor forward(const Tensor& x) const { return kernels::cumprod(x, dim, reverse); }
  // d/dx_k = earlier(y)_k λ_k, λ = recurrence(later(x), g) the other way (Note [Scan rules])
  Tensor vjp(const Ctx& c, const Tensor& g) const {
    const Tensor lambda = recurrence(later(c.input(0), dim, reverse, 0.0), g, dim, !reverse);
    return earlier(c.output(), dim, reverse, 1.0) * lambda;
  }
  // ty = recurrence(x, tx earlier(y))
  Tensor jvp(const Ctx& c, const Tensor& tx) const {
    return recurrence(c.input(0), tx * earlier(c.output(), dim, reverse, 1.0), dim, reverse);
  }
  Tensor vmap(const BatchArgs& b) const { return apply(Cumprod{dim + 1, reverse}, b[0]); }
};

// The scans' inputs: an integer or bool x scans in int64 (as torch.cumsum), a 0-d x as one
// element. Returns the op's result for x's shape.
template <class Op>
Tensor scan_of(const Tensor& x_in, int64_t dim, const char* op) {
  ADJOINT_CHECK(x_in.defined(), Value, op, "got an undefined tensor");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x_in.dim(), 1), op);
  const Tensor x = is_floating(x_in.dtype()) ? x_in : x_in.to(DType::Int64);
  if (x.dim() == 0) return apply(Op{0, false}, x.reshape({1})).reshape({});
  return apply(Op{d, false}, x);
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) { return scan_of<Cumsum>(x, dim, "cumsum"); }
Tensor cumprod(const Tensor& x, int64_t dim) { return scan_of<Cumprod>(x, dim, "cumprod"); }
Tensor Tensor::cumsum(int64_t dim) const { return adjoint::cumsum(*this, dim); }
Tensor Tensor::cumprod(int64_t dim) const { return adjoint::cumprod(*this, dim); }

Tensor linear_recurrence(const Tensor& a_in, const Tensor& b_in, int64_t dim, bool reverse) {
  const char* op = "linear_recurrence";
  ADJOINT_CHECK(a_in.defined() && b_in.defined(), Value, op, "got an undefined a or b");
  ADJOINT_CHECK(is_floating(a_in.dtype()) && is_floating(b_in.dtype()), DType, op,
                "expected floating a and b, got ", describe(a_in), " and ", describe(b_in));
  const Shape shape = broadcast_shapes(a_in.shape(), b_in.shape(), op);
  const DType dt = promote_types(a_in.dtype(), b_in.dtype());
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t d = wrap_dim(dim, std::max<int64_t>(rank, 1), op);
  const Tensor a = cast_to(a_in, dt).expand(shape), b = cast_to(b_in, dt).expand(shape);
  if (rank == 0) return recurrence(a.reshape({1}), b.reshape({1}), 0, reverse).reshape({});
  return recurrence(a, b, d, reverse);
}

}  // namespace adjoint

ADJOINT_OPS_FILE(scan)
