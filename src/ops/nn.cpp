// nn functions that are not losses: softmax and log_softmax (one op each, on the stable
// kernel), layer_norm (one fused op whose rules are written with ops) and dropout (x times
// a random mask, so it needs no rule of its own). The losses live in losses.cpp.
#include <cmath>

#include "adjoint/error.h"
#include "backend/nn_kernels.h"
#include "ops/common.h"

namespace adjoint {
namespace {

struct Softmax {
  static constexpr const char* name = "softmax";
  static constexpr Save save = Save::Output;
  int64_t dim;  // wrapped
  Tensor forward(const Tensor& x) const { return kernels::softmax(x, dim, false); }
  // dx = y * (gy - sum(gy * y)) along dim (the softmax Jacobian is diag(y) - y yᵀ)
  Tensor vjp(const Ctx& c, const Tensor& gy) const {
    const Tensor& y = c.output();
    return y * (gy - sum(gy * y, {dim}, true));
  }
  Tensor jvp(const Ctx& c, const Tensor& tx) const {
    const Tensor& y = c.output();
    return y * (tx - sum(tx * y, {dim}, true));
  }
};

struct LogSoftmax {
  static constexpr const char* name = "log_softmax";
  static constexpr Save save = Save::Output;
  int64_t dim;  // wrapped
  Tensor forward(const Tensor& x) const { return kernels::softmax(x, dim, true); }
  // dx = gy - exp(y) * sum(gy) along dim (d log_softmax = I - 1 softmaxᵀ)
  Tensor vjp(const Ctx& c, const Tensor& gy) const {
    return gy - exp(c.output()) * sum(gy, {dim}, true);
  }
  Tensor jvp(const Ctx& c, const Tensor& tx) const {
    return tx - sum(exp(c.output()) * tx, {dim}, true);
  }
};

// Note [Layer norm statistics in backward]
// The forward saves the per-row mean and rstd from the fused kernel. They carry no history,
// so they are only used when the backward itself is not being differentiated. When it is
// (create_graph, or a forward-mode tangent on x), mean and rstd are recomputed from x with
// ops, so that second derivatives see their dependence on x.
struct LayerNorm {
  static constexpr const char* name = "layer_norm";
  static constexpr Save save = Save::Inputs;
  std::vector<int64_t> norm_dims;  // the trailing normalized dims, wrapped
  std::vector<int64_t> lead_dims;  // the others
  double eps;

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
    const bool differentiate = (tls_mode.grad_enabled && detail::requires_grad(x)) ||
                               (tls_mode.dual_visible != 0 && detail::has_visible_tangent(x));
    if (!differentiate) return {c.saved(0), c.saved(1)};
    Tensor mu = mean(x, norm_dims, true);
    Tensor var = mean((x - mu).square(), norm_dims, true);
    return {mu, rsqrt(var + eps)};
  }

  Tensor sum_lead(const Tensor& t) const { return lead_dims.empty() ? t : sum(t, lead_dims); }

  // x̂ = (x - mean) rstd, g = gy w:
  // dx = rstd (g - mean(g) - x̂ mean(g x̂)), dw = sum_lead(gy x̂), db = sum_lead(gy)
  std::array<Tensor, 3> vjp(const Ctx& c, const Tensor& gy) const {
    const Tensor& x = c.input(0);
    const Tensor& w = c.input(1);
    auto [mu, rstd] = stats(c);
    Tensor xhat = (x - mu) * rstd;
    std::array<Tensor, 3> out;
    if (c.needs_grad(0)) {
      Tensor g = w.defined() ? gy * w : gy;
      out[0] = rstd * (g - mean(g, norm_dims, true) - xhat * mean(g * xhat, norm_dims, true));
    }
    if (c.needs_grad(1)) out[1] = sum_lead(gy * xhat);
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
};

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  ADJOINT_CHECK(x.defined(), Value, "softmax", "got an undefined tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "softmax");
  return apply(Softmax{d}, to_floating(x));
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  ADJOINT_CHECK(x.defined(), Value, "log_softmax", "got an undefined tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "log_softmax");
  return apply(LogSoftmax{d}, to_floating(x));
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
