// group_norm: one fused op (GroupNorm: the kernel normalises each example's groups and applies
// the per-channel affine in one pass), whose input gradient is layer norm's over each group, the
// fused layer_norm_backward primitive on x viewed as [N, G, C / G * S] (its g = gy weight per
// channel); its statistics are recomputed with ops when the backward is differentiated, as layer
// norm's. instance_norm is group norm with one group per channel (and batch norm in evaluation
// when it uses the running statistics).
#include <cstdint>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/normalization_ops.h"
#include "backend/norm_kernels.h"
#include "core/op_fields.h"
#include "ops/backward_ops.h"
#include "ops/batch_norm_util.h"
#include "ops/common.h"

namespace adjoint {
namespace {

int64_t spatial_size(const Tensor& x) {
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.size(d);
  return s;
}

// Note [Group norm statistics in backward]
// As layer norm's (Note [Layer norm statistics in backward] in nn.cpp): the rules use the
// kernel's saved [N, G] mean and rstd unless they are themselves differentiated, and recompute
// them from x with ops then.
struct GroupNorm {
  static constexpr const char* name = "group_norm";
  auto fields() { return std::tie(groups, eps); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  int64_t groups;
  double eps;

  Tensor forward(Saver& saver, const Tensor& x, const Tensor& w, const Tensor& b) const {
    kernels::GroupNormForward r = kernels::group_norm(x, groups, w, b, eps);
    saver.save(r.mean);
    saver.save(r.rstd);
    return r.y;
  }
  // t [N, C, *] as [N, G, C / G * S] (a view when t is contiguous).
  Tensor grouped(const Tensor& t) const {
    return t.reshape({t.size(0), groups, t.size(1) / groups * spatial_size(t)});
  }
  // (mean, rstd) [N, G, 1]: saved, or recomputed with ops (Note [Group norm statistics in
  // backward]).
  std::pair<Tensor, Tensor> stats(const Ctx& c) const {
    const Tensor& x = c.input(0);
    const bool differentiate =
        c.differentiated(x) || (tls_mode.dual_visible != 0 && detail::has_visible_tangent(x));
    if (!differentiate) return {c.saved(0).unsqueeze(2), c.saved(1).unsqueeze(2)};
    const Tensor xg = grouped(x);
    const Tensor mu = mean(xg, {2}, true);
    return {mu, rsqrt(mean((xg - mu).square(), {2}, true) + eps)};
  }

  // x̂ = (x - mean) rstd per group, g = gy w per channel: dx = layer_norm_backward(g, x, mean,
  // rstd) over each group, dw = sum(gy x̂), db = sum(gy), sums over every dim but 1
  std::array<Tensor, 3> vjp(const Ctx& c, const Tensor& gy) const {
    const Tensor& x = c.input(0);
    const Tensor& w = c.input(1);
    const detail::Channels ch{x.dim()};
    const auto [mu, rstd] = stats(c);
    std::array<Tensor, 3> out;
    if (c.needs_grad(0)) {
      const Tensor g = w.defined() ? gy * ch.bc(w) : gy;
      out[0] = layer_norm_backward(grouped(g), grouped(x), {}, mu, rstd, 1).reshape(x.shape());
    }
    if (c.needs_grad(1)) out[1] = ch.sum_c(gy * ((grouped(x) - mu) * rstd).reshape(x.shape()));
    if (c.needs_grad(2)) out[2] = ch.sum_c(gy);
    return out;
  }

  // dy = w rstd (tx - mean(tx) - x̂ mean(tx x̂)) + x̂ tw + tb, means per group
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor& tw, const Tensor& tb) const {
    const Tensor& x = c.input(0);
    const Tensor& w = c.input(1);
    const detail::Channels ch{x.dim()};
    const auto [mu, rstd] = stats(c);
    const Tensor xh = (grouped(x) - mu) * rstd, txg = grouped(tx);
    Tensor t =
        (rstd * (txg - mean(txg, {2}, true) - xh * mean(txg * xh, {2}, true))).reshape(x.shape());
    if (w.defined()) t = t * ch.bc(w);
    if (tw.defined()) t = t + xh.reshape(x.shape()) * ch.bc(tw);
    if (tb.defined()) t = t + ch.bc(tb);
    return t;
  }

  // Batching: the batch dim merges into N ([B N, C, *]: each example's groups are rows of their
  // own); per-example weights (batched w or b) scale a normalisation without them. The VJP's
  // mean and rstd are saved per example as ops give them.
  Tensor vmap(const BatchArgs& b, Saver& s) const {
    const Tensor x = b.with_batch(0);  // [B, N, C, *]
    Shape merged = x.shape();
    merged.erase(0);
    merged[0] = x.size(0) * x.size(1);
    int64_t per_group = x.size(2) / groups;  // elements of one group of one example
    for (int64_t d = 3; d < x.dim(); ++d) per_group *= x.size(d);
    const Tensor xg = x.reshape({x.size(0), x.size(1), groups, per_group});
    const Tensor mu = mean(xg, {3});
    s.save(detail::make_batched(mu, 0, b.level()));
    s.save(detail::make_batched(rsqrt(mean((xg - mu.unsqueeze(3)).square(), {3}) + eps), 0,
                                b.level()));
    if (!b.batched(1) && !b.batched(2))
      return apply(*this, x.reshape(merged), b[1], b[2]).reshape(x.shape());
    const detail::Channels ch{x.dim(), 2};
    Tensor y = apply(*this, x.reshape(merged), Tensor(), Tensor()).reshape(x.shape());
    if (b[1].defined()) y = y * ch.bc(b.with_batch(1));
    if (b[2].defined()) y = y + ch.bc(b.with_batch(2));
    return y;
  }
};

void check_affine(const Tensor& t, int64_t channels, const char* what, const Tensor& x,
                  const char* op) {
  if (!t.defined()) return;
  ADJOINT_CHECK(t.dim() == 1 && t.size(0) == channels, Shape, op, what, " must have shape [",
                channels, "] (the input's channels), got ", describe(t), " for input ",
                describe(x));
  ADJOINT_CHECK(is_floating(t.dtype()), DType, op, what, " must be floating, got ", describe(t));
}

}  // namespace

Tensor group_norm(const Tensor& x_in, int64_t num_groups, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const char* op = "group_norm";
  ADJOINT_CHECK(x_in.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(x_in.dim() >= 2, Shape, op,
                "expected an input [N, C, *] of 2 or more dims (channels at dim 1), got ",
                describe(x_in));
  const int64_t channels = x_in.size(1);
  ADJOINT_CHECK(num_groups > 0 && channels % num_groups == 0, Value, op,
                "expected the input's channels to be divisible by num_groups, got ", describe(x_in),
                " and num_groups ", num_groups);
  check_affine(weight, channels, "weight", x_in, op);
  check_affine(bias, channels, "bias", x_in, op);
  ADJOINT_CHECK(eps >= 0, Value, op, "eps must be non-negative, got ", eps);
  // One dtype for the input and the affine parameters (the wider one), as batch_norm.
  DType dt = to_floating(x_in).dtype();
  for (const Tensor* p : {&weight, &bias})
    if (p->defined()) dt = promote_types(dt, p->dtype());
  return apply(GroupNorm{num_groups, eps}, cast_to(x_in, dt),
               weight.defined() ? cast_to(weight, dt) : Tensor(),
               bias.defined() ? cast_to(bias, dt) : Tensor());
}

Tensor instance_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var,
                     const Tensor& weight, const Tensor& bias, bool use_input_stats,
                     double momentum, double eps) {
  const char* op = "instance_norm";
  ADJOINT_CHECK(x_in.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(x_in.dim() >= 3, Shape, op,
                "expected an input [N, C, *] with at least one spatial dim, got ", describe(x_in));
  const int64_t channels = x_in.size(1);
  check_affine(weight, channels, "weight", x_in, op);
  check_affine(bias, channels, "bias", x_in, op);
  check_affine(running_mean, channels, "running_mean", x_in, op);
  check_affine(running_var, channels, "running_var", x_in, op);
  ADJOINT_CHECK(running_mean.defined() == running_var.defined(), Value, op,
                "running_mean and running_var must be given together, got ", describe(running_mean),
                " and ", describe(running_var));
  if (!use_input_stats) {
    ADJOINT_CHECK(running_mean.defined(), Value, op,
                  "use_input_stats is false, so running_mean and running_var are needed");
    return batch_norm(x_in, running_mean, running_var, weight, bias, false, momentum, eps);
  }
  const int64_t spatial = spatial_size(x_in);
  ADJOINT_CHECK(spatial != 1, Value, op,
                "expected more than 1 spatial element when training, got input ", describe(x_in));
  const Tensor y = group_norm(x_in, channels, weight, bias, eps);
  if (running_mean.defined() && x_in.numel() > 0) {
    // As PyTorch: the running statistics of the N C instances (mean, unbiased variance over
    // their spatial positions) updated with momentum, then averaged over the batch, which is
    // the average of the instance statistics taking the momentum step.
    const Tensor x = to_floating(x_in).detach();
    const int64_t n = x.size(0);
    const BatchNormStats s = batch_norm_stats(x.reshape({1, n * channels, spatial}));
    NoGradGuard no_grad;
    detail::update_running_statistic(
        running_mean, adjoint::mean(s.mean.reshape({n, channels}), {0}), momentum, op);
    detail::update_running_statistic(running_var, adjoint::mean(s.var.reshape({n, channels}), {0}),
                                     momentum, op);
  }
  return y;
}

}  // namespace adjoint

ADJOINT_OPS_FILE(group_norm)
