// nn functions that are not losses: softmax and log_softmax (one op each, on the stable
// kernel, with fused gradient primitives softmax_backward and log_softmax_backward), layer_norm
// (one fused op with the fused layer_norm_backward primitive for its input gradient; all rules
// are written with ops) and dropout (x times a random mask, so it needs no rule of its own).
// The losses live in losses.cpp.
#include <algorithm>
#include <cmath>

#include "adjoint/error.h"
#include "backend/nn_kernels.h"
#include "core/op_fields.h"
#include "ops/backward_ops.h"
#include "ops/common.h"

namespace adjoint {
namespace {

// softmax_backward(gy, y) = y (gy - sum(gy y)) along dim in one kernel. Linear in gy and
// self-adjoint (d/dgy = diag(y) - y yᵀ); d/dy: g (gy - sum(gy y)) - gy sum(g y).
/// What softmax(), log_softmax(), masked_softmax() and their gradients hand their ops: a
/// floating input (for a gradient, the broadcast of the two) and a dim wrapped against it. An
/// imported op's `infer` (Note [Checking an imported graph] in src/export/import.cpp); the
/// optional mask must be bool and broadcast to the input.
detail::OutputSpec softmax_spec(std::span<const detail::ValueSpec> in, int64_t dim, bool gradient,
                                bool masked, const char* op) {
  const detail::ValueSpec& x = spec_of(in, 0, op);
  Shape shape = x.shape;
  if (gradient) {
    const detail::ValueSpec& y = spec_of(in, 1, op);
    shape = broadcast_shapes(x.shape, y.shape, op);
    ADJOINT_CHECK(is_floating(y.dtype), DType, op, "expected a floating tensor, got ", describe(y));
  }
  if (masked) {
    const detail::ValueSpec& mask = spec_of(in, 1, op);
    ADJOINT_CHECK(mask.dtype == DType::Bool && broadcast_shapes(x.shape, mask.shape, op) == x.shape,
                  Shape, op, "mask ", describe(mask), " is not a bool mask of input ", describe(x));
  }
  ADJOINT_CHECK(is_floating(x.dtype), DType, op, "expected a floating tensor, got ", describe(x));
  ADJOINT_CHECK(wrap_dim(dim, static_cast<int64_t>(shape.size()), op) == dim, Index, op, "dim ",
                dim, " is not wrapped for shape ", shape);
  return {shape, std::nullopt};
}

struct SoftmaxBackward {
  static constexpr const char* name = "softmax_backward";
  auto fields() { return std::tie(dim); }
  static constexpr Save save = Save::Inputs;
  int64_t dim;  // wrapped against the broadcast shape
  Tensor forward(const Tensor& gy, const Tensor& y) const {
    return kernels::softmax_backward(gy, y, dim, false);
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return softmax_spec(in, dim, true, false, name);
  }
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& g) const {
    const Tensor& gy = c.input(0);
    const Tensor& y = c.input(1);
    return {c.needs_grad(0) ? softmax_backward(g, y, dim) : Tensor(),
            c.needs_grad(1) ? g * (gy - sum(gy * y, {dim}, true)) - gy * sum(g * y, {dim}, true)
                            : Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& t_gy, const Tensor& t_y) const {
    const Tensor& gy = c.input(0);
    const Tensor& y = c.input(1);
    return softmax_backward(t_gy, y, dim) + t_y * (gy - sum(gy * y, {dim}, true)) -
           y * sum(gy * t_y, {dim}, true);
  }
  // Batching: gy and y broadcast, so the pointwise alignment with dim moved past the batch.
  Tensor vmap(const BatchArgs& b) const {
    const int64_t r = b.max_logical_dim();
    if (r == 0)  // logical 0-d: one element along the softmax dim
      return apply(SoftmaxBackward{1}, b.with_batch(0).unsqueeze(1), b.with_batch(1).unsqueeze(1))
          .squeeze(1);
    return apply(SoftmaxBackward{dim + 1}, b.aligned(0, r), b.aligned(1, r));
  }
};

// log_softmax_backward(gy, y) = gy - exp(y) sum(gy) along dim in one kernel.
// d/dgy: g - sum(g exp(y)); d/dy: -g exp(y) sum(gy).
struct LogSoftmaxBackward {
  static constexpr const char* name = "log_softmax_backward";
  auto fields() { return std::tie(dim); }
  static constexpr Save save = Save::Inputs;
  int64_t dim;  // wrapped against the broadcast shape
  Tensor forward(const Tensor& gy, const Tensor& y) const {
    return kernels::softmax_backward(gy, y, dim, true);
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return softmax_spec(in, dim, true, false, name);
  }
  // sum along dim of t (shaped like gy) seen at the broadcast shape of gy and y.
  Tensor sum_gy(const Ctx& c, const Tensor& t) const {
    const Shape shape = broadcast_shapes(c.input_shape(0), c.input_shape(1), name);
    return sum(t.shape() == shape ? t : t.expand(shape), {dim}, true);
  }
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& g) const {
    const Tensor p = exp(c.input(1));
    return {c.needs_grad(0) ? g - sum(g * p, {dim}, true) : Tensor(),
            c.needs_grad(1) ? -(g * p * sum_gy(c, c.input(0))) : Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& t_gy, const Tensor& t_y) const {
    const Tensor p = exp(c.input(1));
    return t_gy - p * (sum_gy(c, t_gy) + t_y * sum_gy(c, c.input(0)));
  }
  Tensor vmap(const BatchArgs& b) const {
    const int64_t r = b.max_logical_dim();
    if (r == 0)  // logical 0-d: one element along the softmax dim
      return apply(LogSoftmaxBackward{1}, b.with_batch(0).unsqueeze(1),
                   b.with_batch(1).unsqueeze(1))
          .squeeze(1);
    return apply(LogSoftmaxBackward{dim + 1}, b.aligned(0, r), b.aligned(1, r));
  }
};

// The fused softmax gradients: gy is converted to y's dtype, and dim is wrapped against the
// rank of the broadcast shape (the kernel's output).
template <class GradOp>
Tensor apply_softmax_gradient(const Tensor& gy, const Tensor& y, int64_t dim) {
  ADJOINT_CHECK(gy.defined() && y.defined(), Value, GradOp::name, "got an undefined tensor");
  const Tensor g = gy.dtype() == y.dtype() ? gy : gy.to(y.dtype());
  return apply(GradOp{wrap_dim(dim, std::max(g.dim(), y.dim()), GradOp::name)}, g, y);
}

struct Softmax {
  static constexpr const char* name = "softmax";
  auto fields() { return std::tie(dim); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Output;
  int64_t dim;  // wrapped
  Tensor forward(const Tensor& x) const { return kernels::softmax(x, dim, false); }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return softmax_spec(in, dim, false, false, name);
  }
  // dx = y * (gy - sum(gy * y)) along dim (the softmax Jacobian is diag(y) - y yᵀ)
  Tensor vjp(const Ctx& c, const Tensor& gy) const { return softmax_backward(gy, c.output(), dim); }
  Tensor jvp(const Ctx& c, const Tensor& tx) const { return softmax_backward(tx, c.output(), dim); }
  // Batching: dim moves past the batch dim (a logical 0-d input is one element along it).
  Tensor vmap(const BatchArgs& b) const {
    if (b.logical_dim(0) == 0) return apply(Softmax{1}, b[0].unsqueeze(1)).squeeze(1);
    return apply(Softmax{dim + 1}, b[0]);
  }
};

// softmax(masked_fill(x, mask, -inf)): the output is 0 at masked entries, so softmax's own
// gradient formulas already give 0 there and need no mask.
struct MaskedSoftmax {
  static constexpr const char* name = "masked_softmax";
  auto fields() { return std::tie(dim); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Output;
  int64_t dim;  // wrapped
  Tensor forward(const Tensor& x, const Tensor& mask) const {
    return kernels::masked_softmax(x, mask, dim);
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return softmax_spec(in, dim, false, true, name);
  }
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    return {softmax_backward(gy, c.output(), dim), Tensor()};  // the mask has no gradient
  }
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor&) const {
    return softmax_backward(tx, c.output(), dim);
  }
  // Batching: the mask broadcasts to x, so x carries the batch dim whichever is batched.
  Tensor vmap(const BatchArgs& b) const {
    return apply(MaskedSoftmax{dim + 1}, b.with_batch(0), b.aligned(1, b.logical_dim(0)));
  }
};

struct LogSoftmax {
  static constexpr const char* name = "log_softmax";
  auto fields() { return std::tie(dim); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Output;
  int64_t dim;  // wrapped
  Tensor forward(const Tensor& x) const { return kernels::softmax(x, dim, true); }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return softmax_spec(in, dim, false, false, name);
  }
  // dx = gy - exp(y) * sum(gy) along dim (d log_softmax = I - 1 softmaxᵀ)
  Tensor vjp(const Ctx& c, const Tensor& gy) const {
    return log_softmax_backward(gy, c.output(), dim);
  }
  Tensor jvp(const Ctx& c, const Tensor& tx) const {
    return tx - sum(exp(c.output()) * tx, {dim}, true);
  }
  // Batching: dim moves past the batch dim (a logical 0-d input is one element along it).
  Tensor vmap(const BatchArgs& b) const {
    if (b.logical_dim(0) == 0) return apply(LogSoftmax{1}, b[0].unsqueeze(1)).squeeze(1);
    return apply(LogSoftmax{dim + 1}, b[0]);
  }
};

// layer_norm_backward(gy, x, w, mean, rstd) = rstd (g - A - x̂ B) with x̂ = (x - mean) rstd,
// g = gy w, A = mean(g), B = mean(g x̂) over the normalized dims: layer norm's input gradient in
// one kernel, with mean and rstd as inputs of their own (see Note [Layer norm statistics in
// backward]). For a cotangent c, with C1 = mean(c) and C2 = mean(c x̂):
//   d/dg = rstd (c - C1 - x̂ C2)
//   d/dx̂ = -rstd (c B + g C2), so d/dx = rstd d/dx̂ and d/dmean = -rstd d/dx̂
//   d/drstd = c (g - A - x̂ B) + (x - mean) d/dx̂
// (apply sums the last two to the shapes of mean and rstd).
/// What layer_norm() hands its ops: a floating input whose last norm_dims.size() dims (one or
/// more) are normalized, the others `lead_dims`, and an optional weight (or bias) of the
/// normalized shape and the input's dtype. An imported op's `infer` (Note [Checking an
/// imported graph] in src/export/import.cpp).
void check_layer_norm(const detail::ValueSpec& x, const std::vector<int64_t>& norm_dims,
                      const std::vector<int64_t>* lead_dims, std::span<const detail::ValueSpec> in,
                      std::initializer_list<std::size_t> params, const char* op) {
  const auto rank = static_cast<int64_t>(x.shape.size());
  const auto k = static_cast<int64_t>(norm_dims.size());
  bool dims_ok = k >= 1 && k <= rank && is_floating(x.dtype);
  for (int64_t i = 0; dims_ok && i < k; ++i) dims_ok = norm_dims[i] == rank - k + i;
  if (lead_dims) {
    dims_ok = dims_ok && static_cast<int64_t>(lead_dims->size()) == rank - k;
    for (int64_t i = 0; dims_ok && i < rank - k; ++i) dims_ok = (*lead_dims)[i] == i;
  }
  ADJOINT_CHECK(dims_ok, Shape, op, "normalized dims ", Shape(norm_dims),
                " are not the trailing dims of a floating input ", describe(x));
  const Shape normalized(std::vector<int64_t>(x.shape.begin() + (rank - k), x.shape.end()));
  for (std::size_t i : params) {
    if (i >= in.size() || !in[i].defined) continue;
    ADJOINT_CHECK(in[i].shape == normalized && in[i].dtype == x.dtype, Shape, op, "parameter ",
                  describe(in[i]), " is not of the normalized shape ", normalized, " and dtype ",
                  x.dtype);
  }
}

struct LayerNormBackward {
  static constexpr const char* name = "layer_norm_backward";
  auto fields() { return std::tie(norm_dims); }
  static constexpr Save save = Save::Inputs;
  std::vector<int64_t> norm_dims;  // the trailing normalized dims, wrapped

  Tensor forward(const Tensor& gy, const Tensor& x, const Tensor& w, const Tensor& mu,
                 const Tensor& rstd) const {
    return kernels::layer_norm_backward(gy, x, w, mu, rstd, static_cast<int64_t>(norm_dims.size()));
  }
  // (gy, x, weight, mean, rstd): gy shaped as x, a statistic per row of the leading dims.
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec &gy = spec_of(in, 0, name), &x = spec_of(in, 1, name);
    const detail::ValueSpec &mu = spec_of(in, 3, name), &rstd = spec_of(in, 4, name);
    check_layer_norm(x, norm_dims, nullptr, in, {2}, name);
    ADJOINT_CHECK(gy.shape == x.shape && is_floating(gy.dtype), Shape, name, "gradient ",
                  describe(gy), " is not shaped as the input ", describe(x));
    int64_t rows = 1;
    for (std::size_t i = 0; i + norm_dims.size() < x.shape.size(); ++i) rows *= x.shape[i];
    ADJOINT_CHECK(mu.shape.numel() == rows && rstd.shape.numel() == rows, Shape, name,
                  "statistics ", describe(mu), " and ", describe(rstd), " are not one per row of ",
                  describe(x));
    return {x.shape, x.dtype};
  }
  Tensor avg(const Tensor& t) const { return mean(t, norm_dims, true); }

  std::array<Tensor, 5> vjp(const Ctx& c, const Tensor& ct) const {
    const Tensor& gy = c.input(0);
    const Tensor& x = c.input(1);
    const Tensor& w = c.input(2);
    const Tensor& mu = c.input(3);
    const Tensor& a = c.input(4);
    const Tensor g = w.defined() ? gy * w : gy;
    const Tensor xh = (x - mu) * a;
    const Tensor c2 = avg(ct * xh);
    std::array<Tensor, 5> out;
    if (c.needs_grad(0) || (w.defined() && c.needs_grad(2))) {
      const Tensor dg = a * (ct - avg(ct) - xh * c2);
      if (c.needs_grad(0)) out[0] = w.defined() ? dg * w : dg;
      if (w.defined() && c.needs_grad(2)) out[2] = dg * gy;
    }
    if (c.needs_grad(1) || c.needs_grad(3) || c.needs_grad(4)) {
      const Tensor b = avg(g * xh);
      const Tensor dxh = -(a * (ct * b + g * c2));
      if (c.needs_grad(1)) out[1] = dxh * a;
      if (c.needs_grad(3)) out[3] = -(dxh * a);
      if (c.needs_grad(4)) out[4] = dxh * (x - mu) + ct * (g - avg(g) - xh * b);
    }
    return out;
  }

  // d(rstd (g - A - x̂ B)) with dg = dgy w + gy dw and dx̂ = (dx - dmean) rstd + (x - mean) drstd
  Tensor jvp(const Ctx& c, const Tensor& t_gy, const Tensor& t_x, const Tensor& t_w,
             const Tensor& t_mu, const Tensor& t_a) const {
    const Tensor& gy = c.input(0);
    const Tensor& x = c.input(1);
    const Tensor& w = c.input(2);
    const Tensor& mu = c.input(3);
    const Tensor& a = c.input(4);
    const Tensor g = w.defined() ? gy * w : gy;
    const Tensor tg = w.defined() ? t_gy * w + gy * t_w : t_gy;
    const Tensor xh = (x - mu) * a;
    const Tensor txh = (t_x - t_mu) * a + (x - mu) * t_a;
    const Tensor b = avg(g * xh);
    return t_a * (g - avg(g) - xh * b) +
           a * (tg - avg(tg) - txh * b - xh * (avg(tg * xh) + avg(g * txh)));
  }
  // Batching: per-example weights fold into the cotangent (the kernel uses g = gy w).
  Tensor vmap(const BatchArgs& b) const {
    const int64_t r = b.logical_dim(1);
    Tensor gy = b.with_batch(0), w = b[2];
    if (b.batched(2)) {
      gy = gy * b.aligned(2, r);
      w = Tensor();
    }
    Tensor mean = b.batched(3) ? b[3] : b.with_batch(3);
    Tensor rstd = b.batched(4) ? b[4] : b.with_batch(4);
    return apply(LayerNormBackward{detail::shift_dims(norm_dims)}, gy, b.with_batch(1), w, mean,
                 rstd);
  }
};

// Note [Layer norm statistics in backward]
// The forward saves the per-row mean and rstd from the fused kernel. They carry no history,
// so they are only used when the backward itself is not being differentiated. When it is
// (create_graph, or a forward-mode tangent on x), mean and rstd are recomputed from x with
// ops, so that second derivatives see their dependence on x.
struct LayerNorm {
  static constexpr const char* name = "layer_norm";
  auto fields() { return std::tie(norm_dims, lead_dims, eps); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  std::vector<int64_t> norm_dims;  // the trailing normalized dims, wrapped
  std::vector<int64_t> lead_dims;  // the others
  double eps;

  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& x = spec_of(in, 0, name);
    check_layer_norm(x, norm_dims, &lead_dims, in, {1, 2}, name);
    ADJOINT_CHECK(eps >= 0, Value, name, "eps must be non-negative, got ", eps);
    return {x.shape, x.dtype};
  }
  Tensor forward(Saver& saver, const Tensor& x, const Tensor& w, const Tensor& b) const {
    kernels::LayerNormForward r =
        kernels::layer_norm(x, static_cast<int64_t>(norm_dims.size()), w, b, eps);
    saver.save(r.mean);
    saver.save(r.rstd);
    return r.y;
  }

  // (mean, rstd): saved, or recomputed with ops. See Note [Layer norm statistics in backward].
  std::pair<Tensor, Tensor> stats(const Ctx& c) const {
    const Tensor& x = c.input(0);
    const bool differentiate =
        c.differentiated(x) || (tls_mode.dual_visible != 0 && detail::has_visible_tangent(x));
    if (!differentiate) return {c.saved(0), c.saved(1)};
    Tensor mu = mean(x, norm_dims, true);
    Tensor var = mean((x - mu).square(), norm_dims, true);
    return {mu, rsqrt(var + eps)};
  }

  Tensor sum_lead(const Tensor& t) const { return lead_dims.empty() ? t : sum(t, lead_dims); }

  // x̂ = (x - mean) rstd, g = gy w:
  // dx = rstd (g - mean(g) - x̂ mean(g x̂)) (layer_norm_backward), dw = sum_lead(gy x̂),
  // db = sum_lead(gy)
  std::array<Tensor, 3> vjp(const Ctx& c, const Tensor& gy) const {
    const Tensor& x = c.input(0);
    const Tensor& w = c.input(1);
    auto [mu, rstd] = stats(c);
    std::array<Tensor, 3> out;
    if (c.needs_grad(0))
      out[0] = layer_norm_backward(gy, x, w, mu, rstd, static_cast<int64_t>(norm_dims.size()));
    if (c.needs_grad(1)) out[1] = sum_lead(gy * ((x - mu) * rstd));
    if (c.needs_grad(2)) out[2] = sum_lead(gy);
    return out;
  }

  // dy = w rstd (tx - mean(tx) - x̂ mean(tx x̂)) + x̂ tw + tb
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor& tw, const Tensor& tb) const {
    const Tensor& x = c.input(0);
    const Tensor& w = c.input(1);
    // Recomputed with ops under nested forward mode or a recorded JVP (see the Note above).
    const auto [mu, rstd] = stats(c);
    Tensor xhat = (x - mu) * rstd;
    Tensor t = rstd * (tx - mean(tx, norm_dims, true) - xhat * mean(tx * xhat, norm_dims, true));
    if (w.defined()) t = t * w;
    if (tw.defined()) t = t + xhat * tw;
    if (tb.defined()) t = t + tb;
    return t;
  }
  // Batching: the batch dim is one more leading dim; per-example weights (batched w or b)
  // scale a normalisation without them. The VJP's mean and rstd are saved as ops give them.
  Tensor vmap(const BatchArgs& b, Saver& s) const {
    LayerNorm ln{detail::shift_dims(norm_dims), {0}, eps};
    for (int64_t d : lead_dims) ln.lead_dims.push_back(d + 1);
    // [B, *logical] even when only the weight or the bias is batched: each example normalises
    // the same x with its own affine transform.
    const Tensor x = b.with_batch(0);
    Tensor mu = mean(x, ln.norm_dims, true);
    s.save(detail::make_batched(mu, 0, b.level()));
    s.save(detail::make_batched(rsqrt(mean((x - mu).square(), ln.norm_dims, true) + eps), 0,
                                b.level()));
    if (!b.batched(1) && !b.batched(2)) return apply(ln, x, b[1], b[2]);
    const int64_t r = b.logical_dim(0);
    Tensor y = apply(ln, x, Tensor(), Tensor());
    if (b[1].defined()) y = y * b.aligned(1, r);
    if (b[2].defined()) y = y + b.aligned(2, r);
    return y;
  }
};

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  ADJOINT_CHECK(x.defined(), Value, "softmax", "got an undefined tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "softmax");
  return apply(Softmax{d}, to_floating(x));
}

Tensor masked_softmax(const Tensor& x, const Tensor& mask, int64_t dim) {
  const char* op = "masked_softmax";
  ADJOINT_CHECK(x.defined() && mask.defined(), Value, op, "input or mask is undefined");
  ADJOINT_CHECK(mask.dtype() == DType::Bool, DType, op, "mask must be bool, got ", describe(mask));
  ADJOINT_CHECK(broadcast_shapes(x.shape(), mask.shape(), op) == x.shape(), Shape, op, "mask ",
                describe(mask), " does not broadcast to input ", describe(x));
  const int64_t d = wrap_dim(dim, x.dim(), op);
  return apply(MaskedSoftmax{d}, to_floating(x), mask);
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  ADJOINT_CHECK(x.defined(), Value, "log_softmax", "got an undefined tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "log_softmax");
  return apply(LogSoftmax{d}, to_floating(x));
}

Tensor softmax_backward(const Tensor& gy, const Tensor& y, int64_t dim) {
  return apply_softmax_gradient<SoftmaxBackward>(gy, y, dim);
}

Tensor log_softmax_backward(const Tensor& gy, const Tensor& y, int64_t dim) {
  return apply_softmax_gradient<LogSoftmaxBackward>(gy, y, dim);
}

Tensor Tensor::softmax(int64_t dim) const { return adjoint::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return adjoint::log_softmax(*this, dim); }

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  const char* op = "layer_norm";
  ADJOINT_CHECK(x_in.defined(), Value, op, "got an undefined input");
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  ADJOINT_CHECK(k >= 1, Shape, op, "normalized_shape must have at least one dim, got ",
                normalized_shape);
  bool trailing = k <= x_in.dim();
  for (int64_t i = 0; trailing && i < k; ++i)
    trailing = x_in.shape()[x_in.dim() - k + i] == normalized_shape[i];
  ADJOINT_CHECK(trailing, Shape, op, "normalized_shape ", normalized_shape,
                " does not match the trailing dims of input ", describe(x_in));
  Tensor x = to_floating(x_in);
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    const char* what = p == &weight ? "weight" : "bias";
    ADJOINT_CHECK(p->shape() == normalized_shape, Shape, op, what, " must have shape ",
                  normalized_shape, ", got ", describe(*p));
    ADJOINT_CHECK(p->dtype() == x.dtype(), DType, op, what, " dtype must match the input: input ",
                  describe(x), " vs ", what, " ", describe(*p));
  }
  ADJOINT_CHECK(eps >= 0, Value, op, "eps must be non-negative, got ", eps);
  LayerNorm ln;
  for (int64_t i = 0; i < x.dim(); ++i)
    (i < x.dim() - k ? ln.lead_dims : ln.norm_dims).push_back(i);
  ln.eps = eps;
  return apply(ln, x, weight, bias);
}

Tensor layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, int64_t normalized_dims) {
  const char* op = "layer_norm_backward";
  ADJOINT_CHECK(gy.defined() && x.defined() && mean.defined() && rstd.defined(), Value, op,
                "got an undefined tensor");
  ADJOINT_CHECK(is_floating(x.dtype()), DType, op, "expected a floating input, got ", describe(x));
  ADJOINT_CHECK(normalized_dims >= 1 && normalized_dims <= x.dim(), Shape, op, "cannot normalize ",
                normalized_dims, " trailing dims of ", describe(x));
  ADJOINT_CHECK(gy.shape() == x.shape(), Shape, op, "gradient ", describe(gy),
                " must have the input's shape ", describe(x));
  Shape stat_shape = x.shape(), trailing;
  for (int64_t i = x.dim() - normalized_dims; i < x.dim(); ++i) {
    trailing.push_back(x.shape()[i]);
    stat_shape[i] = 1;
  }
  ADJOINT_CHECK(mean.shape() == stat_shape && rstd.shape() == stat_shape, Shape, op,
                "mean and rstd must have shape ", stat_shape, ", got ", describe(mean), " and ",
                describe(rstd));
  ADJOINT_CHECK(!weight.defined() || weight.shape() == trailing, Shape, op,
                "weight must have shape ", trailing, ", got ", describe(weight));
  LayerNormBackward op_struct;
  for (int64_t i = x.dim() - normalized_dims; i < x.dim(); ++i) op_struct.norm_dims.push_back(i);
  const DType dt = x.dtype();
  return apply(op_struct, cast_to(gy, dt), x, weight.defined() ? cast_to(weight, dt) : Tensor(),
               cast_to(mean, dt), cast_to(rstd, dt));
}

Tensor dropout(const Tensor& x_in, double p, bool training, Generator* gen) {
  const char* op = "dropout";
  ADJOINT_CHECK(x_in.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(p >= 0 && p <= 1, Value, op, "probability p must be in [0, 1], got ", p);
  if (!training || p == 0) return x_in;
  Tensor x = to_floating(x_in);
  if (p == 1) return x * zeros_like(x);  // keeps the graph: the gradient is zero
  // keep an element when u < 1 - p, u ~ U[0, 1); kept ones are scaled by 1 / (1 - p)
  Tensor u = rand(x.shape(), x.dtype(), gen);
  Tensor mask = lt(u, 1 - p).to(x.dtype()) * (1 / (1 - p));
  // d/dx (x * mask) = mask
  return x * mask;
}

}  // namespace adjoint

ADJOINT_OPS_FILE(nn)
