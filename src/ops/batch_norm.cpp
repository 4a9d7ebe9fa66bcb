// batch_norm: with batch statistics one fused op (BatchNorm) whose input gradient is the fused
// primitive batch_norm_backward, as layer_norm; with running statistics (evaluation) a per-channel
// affine written with ops. The running-statistic update is in the public function, with in-place
// ops under no gradient, from batch_norm_stats (per-channel mean and unbiased variance, one
// kernel). All rules are written with ops, so every order of derivative works.
#include <cstdint>
#include <typeinfo>
#include <vector>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/normalization_ops.h"
#include "backend/norm_kernels.h"
#include "core/memory_format.h"
#include "core/op_fields.h"
#include "ops/batch_norm_util.h"
#include "ops/common.h"

namespace adjoint {
namespace {

// Note [Batch norm under vmap]
// A batched input [B, N, C, *] is batch norm of [N, B C, *]: each example's channels become
// channels of their own, so one call of the op normalises every example with its own statistics.
// Per-channel tensors fold the same way ([B, C] to [B C]; unbatched ones repeated per example),
// and the result unfolds back. The permute makes the fold a copy, paid only under vmap.
Tensor fold_batch(const Tensor& xb) {  // [B, N, C, *] -> [N, B C, *]
  std::vector<int64_t> perm{1, 0};
  for (int64_t d = 2; d < xb.dim(); ++d) perm.push_back(d);
  Shape s;
  s.push_back(xb.size(1));
  s.push_back(xb.size(0) * xb.size(2));
  for (int64_t d = 3; d < xb.dim(); ++d) s.push_back(xb.size(d));
  return xb.permute(perm).reshape(s);
}
Tensor unfold_batch(const Tensor& y, int64_t batch, int64_t channels) {  // -> [B, N, C, *]
  Shape s;
  s.push_back(y.size(0));
  s.push_back(batch);
  s.push_back(channels);
  for (int64_t d = 2; d < y.dim(); ++d) s.push_back(y.size(d));
  std::vector<int64_t> perm{1, 0};
  for (int64_t d = 2; d <= y.dim(); ++d) perm.push_back(d);
  return y.reshape(s).permute(perm);
}
Tensor fold_channels(const BatchArgs& b, std::size_t i) {  // [B, C] (or [C]) -> [B C]
  if (!b[i].defined()) return Tensor();
  const Tensor t = b.with_batch(i);
  return t.reshape({t.numel()});
}

// Note [Channels-last batch norm in ops]
// The fused kernels keep a channels-last x channels-last (Note [Channels-last batch norm] in
// backend/cpu/batch_norm_channels_last.cpp). What is written with ops follows: for such an x the
// evaluation affine and the weight and bias gradients run on x's memory order [N, *sp, C], where
// a [C] broadcasts over the last dim and the per-channel sums reduce rows of C, both reading
// memory in order, and evaluation's result is permuted back, channels-last as its input. The
// choice reads strides, never values; the results are those of the [N, C, *] ops up to rounding.
std::vector<int64_t> to_memory_order(int64_t rank) {  // [N, C, *sp] -> [N, *sp, C]
  std::vector<int64_t> perm{0};
  for (int64_t d = 2; d < rank; ++d) perm.push_back(d);
  perm.push_back(1);
  return perm;
}
std::vector<int64_t> from_memory_order(int64_t rank) {  // [N, *sp, C] -> [N, C, *sp]
  std::vector<int64_t> perm{0, rank - 1};
  for (int64_t d = 1; d + 1 < rank; ++d) perm.push_back(d);
  return perm;
}
// t [N, C, *sp] as rows [N prod(sp), C] in x's memory order (a view when t is channels-last).
Tensor channel_rows(const Tensor& t) {
  return t.permute(to_memory_order(t.dim())).reshape({t.numel() / t.size(1), t.size(1)});
}

// batch_norm_backward(gy, x, w, mean, rstd) = rstd (g - A - x̂ B) with x̂ = (x - mean) rstd,
// g = gy w, A = mean(g), B = mean(g x̂) per channel: layer_norm_backward's formula with its means
// over every dim but 1 (see the derivation above LayerNormBackward in nn.cpp). For a cotangent
// c, with C1 = mean(c) and C2 = mean(c x̂):
//   d/dg = rstd (c - C1 - x̂ C2), d/dx̂ = -rstd (c B + g C2), d/dx = rstd d/dx̂,
//   d/dmean = -sum(rstd d/dx̂), d/drstd = sum(c (g - A - x̂ B) + (x - mean) d/dx̂).
struct BatchNormBackward {
  static constexpr const char* name = "batch_norm_backward";
  static constexpr Save save = Save::Inputs;

  Tensor forward(const Tensor& gy, const Tensor& x, const Tensor& w, const Tensor& mu,
                 const Tensor& rstd) const {
    return kernels::batch_norm_backward(gy, x, w, mu, rstd);
  }

  std::array<Tensor, 5> vjp(const Ctx& c, const Tensor& ct) const {
    const Tensor& gy = c.input(0);
    const Tensor& x = c.input(1);
    const Tensor& w = c.input(2);
    const detail::Channels ch{x.dim()};
    const Tensor mu = ch.bc(c.input(3)), a = ch.bc(c.input(4));
    const Tensor g = w.defined() ? gy * ch.bc(w) : gy;
    const Tensor xh = (x - mu) * a;
    const Tensor c2 = ch.avg(ct * xh);
    std::array<Tensor, 5> out;
    if (c.needs_grad(0) || (w.defined() && c.needs_grad(2))) {
      const Tensor dg = a * (ct - ch.avg(ct) - xh * c2);
      if (c.needs_grad(0)) out[0] = w.defined() ? dg * ch.bc(w) : dg;
      if (w.defined() && c.needs_grad(2)) out[2] = ch.sum_c(dg * gy);
    }
    if (c.needs_grad(1) || c.needs_grad(3) || c.needs_grad(4)) {
      const Tensor bb = ch.avg(g * xh);
      const Tensor dxh = -(a * (ct * bb + g * c2));
      if (c.needs_grad(1)) out[1] = dxh * a;
      if (c.needs_grad(3)) out[3] = -ch.sum_c(dxh * a);
      if (c.needs_grad(4)) out[4] = ch.sum_c(dxh * (x - mu) + ct * (g - ch.avg(g) - xh * bb));
    }
    return out;
  }

  // d(rstd (g - A - x̂ B)) with dg = dgy w + gy dw and dx̂ = (dx - dmean) rstd + (x - mean) drstd
  Tensor jvp(const Ctx& c, const Tensor& t_gy, const Tensor& t_x, const Tensor& t_w,
             const Tensor& t_mu, const Tensor& t_a) const {
    const Tensor& gy = c.input(0);
    const Tensor& x = c.input(1);
    const Tensor& w = c.input(2);
    const detail::Channels ch{x.dim()};
    const Tensor mu = ch.bc(c.input(3)), a = ch.bc(c.input(4));
    const Tensor g = w.defined() ? gy * ch.bc(w) : gy;
    const Tensor tg = w.defined() ? t_gy * ch.bc(w) + gy * ch.bc(t_w) : t_gy;
    const Tensor xh = (x - mu) * a;
    const Tensor txh = (t_x - ch.bc(t_mu)) * a + (x - mu) * ch.bc(t_a);
    const Tensor bb = ch.avg(g * xh);
    return ch.bc(t_a) * (g - ch.avg(g) - xh * bb) +
           a * (tg - ch.avg(tg) - txh * bb - xh * (ch.avg(tg * xh) + ch.avg(g * txh)));
  }
  // Batching: see Note [Batch norm under vmap].
  Tensor vmap(const BatchArgs& b) const {
    return unfold_batch(
        apply(BatchNormBackward{}, fold_batch(b.with_batch(0)), fold_batch(b.with_batch(1)),
              fold_channels(b, 2), fold_channels(b, 3), fold_channels(b, 4)),
        b.size(), b.with_batch(1).size(2));
  }
};

// Note [Batch norm statistics in backward]
// As layer norm's (Note [Layer norm statistics in backward] in nn.cpp): the forward saves the
// kernel's per-channel mean and rstd, which carry no history, so the rules use them only when
// they are not themselves differentiated; under create_graph or a nested forward-mode tangent on
// x they are recomputed from x with ops.
struct BatchNorm {
  static constexpr const char* name = "batch_norm";
  auto fields() { return std::tie(eps); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  double eps;

  Tensor forward(Saver& saver, const Tensor& x, const Tensor& w, const Tensor& b) const {
    kernels::BatchNormForward r = kernels::batch_norm(x, w, b, eps);
    saver.save(r.mean);
    saver.save(r.rstd);
    return r.y;
  }

  // (mean, rstd), [C]: saved, or recomputed with ops (Note [Batch norm statistics in backward]).
  std::pair<Tensor, Tensor> stats(const Ctx& c) const {
    const Tensor& x = c.input(0);
    const bool differentiate =
        c.differentiated(x) || (tls_mode.dual_visible != 0 && detail::has_visible_tangent(x));
    if (!differentiate) return {c.saved(0), c.saved(1)};
    const detail::Channels ch{x.dim()};
    const Tensor mu = ch.mean_c(x);
    const Tensor var = ch.mean_c((x - ch.bc(mu)).square());
    return {mu, rsqrt(var + eps)};
  }

  // x̂ = (x - mean) rstd per channel: dx = batch_norm_backward(gy, x, w, mean, rstd),
  // dw = sum(gy x̂), db = sum(gy), sums over every dim but 1
  std::array<Tensor, 3> vjp(const Ctx& c, const Tensor& gy) const {
    const Tensor& x = c.input(0);
    const Tensor& w = c.input(1);
    const detail::Channels ch{x.dim()};
    auto [mu, rstd] = stats(c);
    std::array<Tensor, 3> out;
    if (c.needs_grad(0)) out[0] = batch_norm_backward(gy, x, w, mu, rstd);
    if (is_channels_last(x)) {  // See Note [Channels-last batch norm in ops].
      const Tensor gr = channel_rows(gy);
      if (c.needs_grad(1)) out[1] = sum(gr * ((channel_rows(x) - mu) * rstd), {0});
      if (c.needs_grad(2)) out[2] = sum(gr, {0});
      return out;
    }
    if (c.needs_grad(1)) out[1] = ch.sum_c(gy * ((x - ch.bc(mu)) * ch.bc(rstd)));
    if (c.needs_grad(2)) out[2] = ch.sum_c(gy);
    return out;
  }

  // dy = w rstd (tx - mean(tx) - x̂ mean(tx x̂)) + x̂ tw + tb, per channel
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor& tw, const Tensor& tb) const {
    const Tensor& x = c.input(0);
    const Tensor& w = c.input(1);
    const detail::Channels ch{x.dim()};
    const auto [mu, rstd] = stats(c);
    const Tensor xhat = (x - ch.bc(mu)) * ch.bc(rstd);
    Tensor t = ch.bc(rstd) * (tx - ch.avg(tx) - xhat * ch.avg(tx * xhat));
    if (w.defined()) t = t * ch.bc(w);
    if (tw.defined()) t = t + xhat * ch.bc(tw);
    if (tb.defined()) t = t + ch.bc(tb);
    return t;
  }

  // Batching: see Note [Batch norm under vmap]. The VJP's mean and rstd are saved per example
  // as ops give them.
  Tensor vmap(const BatchArgs& b, Saver& s) const {
    const Tensor x = b.with_batch(0);  // [B, N, C, *]
    const detail::Channels ch{x.dim(), 2};
    Tensor mu = ch.mean_c(x);                                        // [B, C]
    Tensor rstd = rsqrt(ch.mean_c((x - ch.bc(mu)).square()) + eps);  // [B, C]
    s.save(detail::make_batched(mu, 0, b.level()));
    s.save(detail::make_batched(rstd, 0, b.level()));
    return unfold_batch(
        apply(BatchNorm{eps}, fold_batch(x), fold_channels(b, 1), fold_channels(b, 2)), b.size(),
        x.size(2));
  }
};

// The per-channel mean and unbiased variance, packed [2, C], for the running estimates.
// With M values per channel: d mean / dx = 1 / M, d var / dx = 2 (x - mean) / (M - 1).
struct BatchNormStatsOp {
  static constexpr const char* name = "batch_norm_stats";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;

  Tensor forward(const Tensor& x) const { return kernels::batch_norm_moments(x, 1); }
  static double count(const Ctx& c) {
    const Shape& s = c.input_shape(0);
    return s[1] == 0 ? 0.0 : static_cast<double>(s.numel() / s[1]);
  }
  Tensor vjp(const Ctx& c, const Tensor& g) const {
    const Tensor& x = c.input(0);
    const detail::Channels ch{x.dim()};
    const double m = count(c);
    const Tensor centred = x - ch.avg(x);
    return ch.bc(g.select(0, 0)) * (1 / m) + ch.bc(g.select(0, 1)) * centred * (2 / (m - 1));
  }
  Tensor jvp(const Ctx& c, const Tensor& tx) const {
    const Tensor& x = c.input(0);
    const detail::Channels ch{x.dim()};
    const double m = count(c);
    const Tensor centred = x - ch.avg(x);
    return stack({ch.sum_c(tx) * (1 / m), ch.sum_c(centred * tx) * (2 / (m - 1))}, 0);
  }
  // Batching: see Note [Batch norm under vmap]; [2, B C] unfolds to [B, 2, C].
  Tensor vmap(const BatchArgs& b) const {
    const Tensor packed = apply(BatchNormStatsOp{}, fold_batch(b.with_batch(0)));
    return packed.reshape({2, b.size(), b.with_batch(0).size(2)}).permute({1, 0, 2});
  }
};

// A per-channel parameter or statistic of batch_norm: undefined, or a floating [C].
void check_per_channel(const Tensor& t, int64_t channels, const char* what, const Tensor& x,
                       const char* op) {
  if (!t.defined()) return;
  ADJOINT_CHECK(t.dim() == 1 && t.size(0) == channels, Shape, op, what, " must have shape [",
                channels, "] (the input's channels), got ", describe(t), " for input ",
                describe(x));
  ADJOINT_CHECK(is_floating(t.dtype()), DType, op, what, " must be floating, got ", describe(t));
}

}  // namespace

namespace detail {

void update_running_statistic(const Tensor& running, const Tensor& stat, double momentum,
                              const char* op) {
  try {
    NoGradGuard no_grad;
    Tensor r = running;
    r.copy_(running * (1 - momentum) + stat * momentum);
  } catch (const Error& e) {
    // A subclass (compile's graph break) is caught by its type further up: pass it on as it is.
    if (typeid(e) != typeid(Error)) throw;
    throw Error(
        e.kind(), op,
        str("cannot update the running statistics ", describe(running), " in place: ", e.what()));
  }
}

}  // namespace detail

BatchNormStats batch_norm_stats(const Tensor& x_in) {
  const char* op = "batch_norm_stats";
  ADJOINT_CHECK(x_in.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(x_in.dim() >= 2, Shape, op, "expected an input [N, C, *] of 2 or more dims, got ",
                describe(x_in));
  const Tensor packed = apply(BatchNormStatsOp{}, to_floating(x_in));
  return {packed.select(0, 0), packed.select(0, 1)};
}

Tensor batch_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd) {
  const char* op = "batch_norm_backward";
  ADJOINT_CHECK(gy.defined() && x.defined() && mean.defined() && rstd.defined(), Value, op,
                "got an undefined tensor");
  ADJOINT_CHECK(is_floating(x.dtype()), DType, op, "expected a floating input, got ", describe(x));
  ADJOINT_CHECK(x.dim() >= 2, Shape, op, "expected an input [N, C, *] of 2 or more dims, got ",
                describe(x));
  ADJOINT_CHECK(gy.shape() == x.shape(), Shape, op, "gradient ", describe(gy),
                " must have the input's shape ", describe(x));
  const int64_t channels = x.size(1);
  check_per_channel(weight, channels, "weight", x, op);
  check_per_channel(mean, channels, "mean", x, op);
  check_per_channel(rstd, channels, "rstd", x, op);
  const DType dt = x.dtype();
  return apply(BatchNormBackward{}, cast_to(gy, dt), x,
               weight.defined() ? cast_to(weight, dt) : Tensor(), cast_to(mean, dt),
               cast_to(rstd, dt));
}

Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps) {
  const char* op = "batch_norm";
  ADJOINT_CHECK(x_in.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(x_in.dim() >= 2, Shape, op,
                "expected an input [N, C, *] of 2 or more dims (channels at dim 1), got ",
                describe(x_in));
  const int64_t channels = x_in.size(1);
  check_per_channel(weight, channels, "weight", x_in, op);
  check_per_channel(bias, channels, "bias", x_in, op);
  check_per_channel(running_mean, channels, "running_mean", x_in, op);
  check_per_channel(running_var, channels, "running_var", x_in, op);
  ADJOINT_CHECK(running_mean.defined() == running_var.defined(), Value, op,
                "running_mean and running_var must be given together, got ", describe(running_mean),
                " and ", describe(running_var));
  ADJOINT_CHECK(eps >= 0, Value, op, "eps must be non-negative, got ", eps);
  // One dtype for the input and the affine parameters (the wider one): a bfloat16 activation
  // meets a float32 weight under autocast, and the weight must not be rounded to bfloat16.
  DType dt = to_floating(x_in).dtype();
  for (const Tensor* p : {&weight, &bias})
    if (p->defined()) dt = promote_types(dt, p->dtype());
  const Tensor x = cast_to(x_in, dt);
  const Tensor w = weight.defined() ? cast_to(weight, dt) : Tensor();
  const Tensor b = bias.defined() ? cast_to(bias, dt) : Tensor();

  if (training || !running_mean.defined()) {
    int64_t per_channel = x.size(0);
    for (int64_t d = 2; d < x.dim(); ++d) per_channel *= x.size(d);
    ADJOINT_CHECK(per_channel != 1, Value, op,
                  "expected more than 1 value per channel when training, got input ", describe(x));
    Tensor y = apply(BatchNorm{eps}, x, w, b);
    if (training && running_mean.defined() && x.numel() > 0) {
      const BatchNormStats s = batch_norm_stats(x.detach());
      detail::update_running_statistic(running_mean, s.mean, momentum, op);
      detail::update_running_statistic(running_var, s.var, momentum, op);
    }
    return y;
  }
  // Evaluation: y = x scale + shift with scale = w / sqrt(running_var + eps) and
  // shift = b - running_mean scale, per channel (ops: differentiable in all five).
  const detail::Channels ch{x.dim()};
  Tensor scale = rsqrt(running_var + eps);
  if (w.defined()) scale = scale * w;
  Tensor shift = -(running_mean * scale);
  if (b.defined()) shift = shift + b;
  // In the running statistics' precision, the result in the input's and parameters' dtype, as in
  // training (float32 statistics of a bfloat16 model give bfloat16).
  if (is_channels_last(x)) {  // See Note [Channels-last batch norm in ops].
    const Tensor rows = x.permute(to_memory_order(x.dim()));
    return cast_to(rows * scale + shift, dt).permute(from_memory_order(x.dim()));
  }
  return cast_to(x * ch.bc(scale) + ch.bc(shift), dt);
}

}  // namespace adjoint

ADJOINT_OPS_FILE(batch_norm)
