// The convolution ops: three primitives, each linear in each of its inputs, whose derivative
// rules are written with one another, so that derivatives of every order stay convolutions:
//   convolution(x, w, b)         y = x ⋆ w + b                        [N, O, *out]
//   conv_transpose(gy, w, b)     the adjoint of x ↦ x ⋆ w, plus b      [N, C, *in]
//   conv_weight_grad(x, gy)      the adjoint of w ↦ x ⋆ w              [O, C / groups, *k]
// all described by the geometry of the forward convolution (ConvAttrs). conv1d/2d/3d and
// conv_transpose1d/2d (conv_api.cpp) are these ops after their argument checks.
#include "adjoint/error.h"
#include "backend/conv_kernels.h"
#include "core/op_fields.h"
#include "ops/common.h"
#include "ops/conv_geometry.h"

namespace adjoint {
namespace detail {
namespace {

// A bias gradient: g [N, C, *spatial] summed over all but the channels. The spatial dims go
// first and the batch after: one sum over {0, 2, 3} of [64, 16, 28, 28] float32 took 12 ms,
// the two sums 0.1 ms (the reduction kernel walks non-adjacent dims slowly).
Tensor bias_grad(const Tensor& g) {
  std::vector<int64_t> spatial;
  for (int64_t i = 2; i < g.dim(); ++i) spatial.push_back(i);
  return (spatial.empty() ? g : g.sum(spatial)).sum({0});
}

// bias [C] as [C, 1, ...] against a [N, C, *spatial] tensor (a kernel-side view, no history).
Tensor bias_view(const Tensor& b, int64_t rank) {
  Shape shape{b.shape()[0]};
  for (int64_t i = 2; i < rank; ++i) shape.push_back(1);
  const Tensor c = b.is_contiguous() ? b : kernels::cast(b, b.dtype());
  return make_view(c, shape, contiguous_strides(shape), c.storage_offset());
}

// A spatial size [*s] from a shape [N, C, *s].
std::vector<int64_t> spatial_size(const Shape& s) { return {s.begin() + 2, s.end()}; }

// [B, N, C, *s] -> [N, B C, *s]: a batch of problems as groups of one problem.
Tensor batch_into_channels(const Tensor& t) {
  Shape s = t.shape();
  Shape out{s[1], s[0] * s[2]};
  for (std::size_t i = 3; i < s.size(); ++i) out.push_back(s[i]);
  return t.transpose(0, 1).reshape(out);
}
// [N, B C, *s] -> [B, N, C, *s].
Tensor channels_into_batch(const Tensor& t, int64_t b) {
  Shape s = t.shape();
  Shape out{s[0], b, s[1] / b};
  for (std::size_t i = 2; i < s.size(); ++i) out.push_back(s[i]);
  return t.reshape(out).transpose(0, 1);
}
// [B, N, *s] <-> [B N, *s].
Tensor fold_batch(const Tensor& t) {
  Shape s = t.shape();
  Shape out{s[0] * s[1]};
  for (std::size_t i = 2; i < s.size(); ++i) out.push_back(s[i]);
  return t.reshape(out);
}
Tensor unfold_batch(const Tensor& t, int64_t b) {
  Shape s = t.shape();
  Shape out{b, s[0] / b};
  for (std::size_t i = 1; i < s.size(); ++i) out.push_back(s[i]);
  return t.reshape(out);
}
// A weight [B, O, ...] (or bias [B, O]) as [B O, ...].
Tensor fold_weight(const Tensor& w) { return fold_batch(w); }

// Batched bias [B, C] added to y [B, N, C, *s].
Tensor add_batched_bias(const Tensor& y, const Tensor& b) {
  Shape s{b.shape()[0], 1, b.shape()[1]};
  for (int64_t i = 3; i < y.dim(); ++i) s.push_back(1);
  return y + b.reshape(s);
}

struct Convolution {
  static constexpr const char* name = "convolution";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Lower;
  static constexpr Save save = Save::Inputs;
  ConvAttrs a;
  auto fields() { return std::tie(a); }

  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& x = spec_of(in, 0, name);
    const detail::ValueSpec& w = spec_of(in, 1, name);
    return {conv_output_shape(x, w, in.size() > 2 ? &in[2] : nullptr, a, name), x.dtype};
  }
  Tensor forward(const Tensor& x, const Tensor& w, const Tensor& b) const {
    return kernels::conv_forward(x, w, b, a.geometry());
  }
  // y = x ⋆ w + b: dx = conv_transpose(gy, w), dw = conv_weight_grad(x, gy), db = Σ gy over
  // the batch and spatial dims
  std::array<Tensor, 3> vjp(const Ctx& c, const Tensor& gy) const {
    const Tensor& x = c.input(0);
    const Tensor& w = c.input(1);
    std::array<Tensor, 3> out;
    if (c.needs_grad(0))
      out[0] = apply_conv_transpose(a, spatial_size(c.input_shape(0)), gy, w, Tensor());
    if (c.needs_grad(1)) out[1] = apply_conv_weight_grad(a, spatial_size(c.input_shape(1)), x, gy);
    if (c.needs_grad(2) && c.input(2).defined()) out[2] = bias_grad(gy);
    return out;
  }
  // dy = tx ⋆ w + x ⋆ tw + tb (bilinear; an undefined tangent is zero)
  static constexpr bool jvp_undefined_is_zero = true;
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor& tw, const Tensor& tb) const {
    Tensor t =
        sum_defined(tx.defined() ? apply_convolution(a, tx, c.input(1), Tensor()) : Tensor(),
                    tw.defined() ? apply_convolution(a, c.input(0), tw, Tensor()) : Tensor());
    if (tb.defined()) {
      const Tensor tb_view = tb.reshape(bias_shape(tb, c.output().dim()));
      t = t.defined() ? t + tb_view : tb_view.expand(c.output().shape());
    }
    return t.defined() ? t : zeros_like(c.output());
  }
  static Shape bias_shape(const Tensor& b, int64_t rank) {
    Shape s{b.shape()[0]};
    for (int64_t i = 2; i < rank; ++i) s.push_back(1);
    return s;
  }
  // Batching: a shared weight folds the vmap dim into the batch; a batched weight makes the
  // examples groups of one convolution (x [B, N, C, *] as [N, B C, *], w as [B O, C/g, *k]).
  Tensor vmap(const BatchArgs& b) const {
    const int64_t n = b.size();
    if (!b.batched(1)) {
      const Tensor y = unfold_batch(
          apply_convolution(a, fold_batch(b.with_batch(0)), b[1], b.batched(2) ? Tensor() : b[2]),
          n);
      return b.batched(2) ? add_batched_bias(y, b[2]) : y;
    }
    Tensor bias;
    if (b[2].defined()) bias = fold_weight(b.with_batch(2));
    const Tensor y = apply_convolution(a.times_groups(n), batch_into_channels(b.with_batch(0)),
                                       fold_weight(b[1]), bias);
    return channels_into_batch(y, n);
  }
};

struct ConvTranspose {
  static constexpr const char* name = "conv_transpose";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Lower;
  static constexpr Save save = Save::Inputs;
  ConvAttrs a;                   // the geometry of the convolution this is the adjoint of
  std::vector<int64_t> in_size;  // that convolution's input spatial size: this op's output's
  auto fields() { return std::tie(a, in_size); }

  // (gy [N, O, *out], w [O, C/g, *k], bias [C]): the output [N, C, *in_size], where the
  // convolution of it gives gy's shape.
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& gy = spec_of(in, 0, name);
    const detail::ValueSpec& w = spec_of(in, 1, name);
    ADJOINT_CHECK(w.shape.size() == a.spatial() + 2 && in_size.size() == a.spatial() &&
                      gy.shape.size() == a.spatial() + 2,
                  Shape, name, "ranks disagree: input ", describe(gy), ", weight ", describe(w));
    ValueSpec x{Shape{gy.shape[0], w.shape[1] * a.groups}, gy.dtype, true};
    for (int64_t s : in_size) x.shape.push_back(s);
    const Shape y = conv_output_shape(x, w, nullptr, a, name);
    ADJOINT_CHECK(y == gy.shape, Shape, name, "input ", describe(gy), " is not the shape ", y,
                  " a convolution of weight ", describe(w), " gives from ", describe(x));
    if (in.size() > 2 && in[2].defined)
      ADJOINT_CHECK(in[2].shape == Shape{x.shape[1]} && in[2].dtype == gy.dtype, Shape, name,
                    "bias ", describe(in[2]), " is not one ", gy.dtype, " per output channel (",
                    x.shape[1], ")");
    return {x.shape, gy.dtype};
  }
  Tensor forward(const Tensor& gy, const Tensor& w, const Tensor& b) const {
    Shape shape{gy.shape()[0], w.shape()[1] * a.groups};
    for (int64_t s : in_size) shape.push_back(s);
    Tensor y = kernels::conv_backward_data(gy, w, a.geometry(), shape);
    if (b.defined()) kernels::binary_into(kernels::Binary::Add, y, y, bias_view(b, y.dim()));
    return y;
  }
  // y = T(gy, w) + b with <T(gy, w), u> = <gy, u ⋆ w>: dgy = g ⋆ w, dw = conv_weight_grad(g, gy),
  // db = Σ g over the batch and spatial dims
  std::array<Tensor, 3> vjp(const Ctx& c, const Tensor& g) const {
    std::array<Tensor, 3> out;
    if (c.needs_grad(0)) out[0] = apply_convolution(a, g, c.input(1), Tensor());
    if (c.needs_grad(1))
      out[1] = apply_conv_weight_grad(a, spatial_size(c.input_shape(1)), g, c.input(0));
    if (c.needs_grad(2) && c.input(2).defined()) out[2] = bias_grad(g);
    return out;
  }
  // dy = T(tgy, w) + T(gy, tw) + tb
  static constexpr bool jvp_undefined_is_zero = true;
  Tensor jvp(const Ctx& c, const Tensor& tgy, const Tensor& tw, const Tensor& tb) const {
    Tensor t = sum_defined(
        tgy.defined() ? apply_conv_transpose(a, in_size, tgy, c.input(1), Tensor()) : Tensor(),
        tw.defined() ? apply_conv_transpose(a, in_size, c.input(0), tw, Tensor()) : Tensor());
    if (tb.defined()) {
      const Tensor tb_view = tb.reshape(Convolution::bias_shape(tb, c.output().dim()));
      t = t.defined() ? t + tb_view : tb_view.expand(c.output().shape());
    }
    return t.defined() ? t : zeros_like(c.output());
  }
  // Batching: as the convolution's (the examples fold into the batch, or become groups).
  Tensor vmap(const BatchArgs& b) const {
    const int64_t n = b.size();
    if (!b.batched(1)) {
      const Tensor y = unfold_batch(apply_conv_transpose(a, in_size, fold_batch(b.with_batch(0)),
                                                         b[1], b.batched(2) ? Tensor() : b[2]),
                                    n);
      return b.batched(2) ? add_batched_bias(y, b[2]) : y;
    }
    Tensor bias;
    if (b[2].defined()) bias = fold_weight(b.with_batch(2));
    const Tensor y = apply_conv_transpose(
        a.times_groups(n), in_size, batch_into_channels(b.with_batch(0)), fold_weight(b[1]), bias);
    return channels_into_batch(y, n);
  }
};

struct ConvWeightGrad {
  static constexpr const char* name = "conv_weight_grad";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Lower;
  static constexpr Save save = Save::Inputs;
  ConvAttrs a;
  std::vector<int64_t> kernel;  // the weight's spatial size
  auto fields() { return std::tie(a, kernel); }

  // (x [N, C, *in], gy [N, O, *out]) -> [O, C/g, *kernel], gy the convolution's output shape.
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& x = spec_of(in, 0, name);
    const detail::ValueSpec& gy = spec_of(in, 1, name);
    ADJOINT_CHECK(x.shape.size() == a.spatial() + 2 && gy.shape.size() == a.spatial() + 2 &&
                      kernel.size() == a.spatial() && a.groups > 0 && x.shape[1] % a.groups == 0,
                  Shape, name, "ranks disagree: input ", describe(x), ", gradient ", describe(gy));
    ValueSpec w{Shape{gy.shape[1], x.shape[1] / a.groups}, x.dtype, true};
    for (int64_t k : kernel) w.shape.push_back(k);
    const Shape y = conv_output_shape(x, w, nullptr, a, name);
    ADJOINT_CHECK(y == gy.shape && gy.dtype == x.dtype, Shape, name, "gradient ", describe(gy),
                  " is not the shape ", y, " of the convolution of ", describe(x), " by ",
                  describe(w));
    return {w.shape, x.dtype};
  }
  Tensor forward(const Tensor& x, const Tensor& gy) const {
    Shape shape{gy.shape()[1], x.shape()[1] / a.groups};
    for (int64_t k : kernel) shape.push_back(k);
    return kernels::conv_backward_weight(x, gy, a.geometry(), shape);
  }
  // gw = W(x, gy) with <W(x, gy), v> = <x ⋆ v, gy>: dx = conv_transpose(gy, g), dgy = x ⋆ g
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& g) const {
    return {c.needs_grad(0)
                ? apply_conv_transpose(a, spatial_size(c.input_shape(0)), c.input(1), g, Tensor())
                : Tensor(),
            c.needs_grad(1) ? apply_convolution(a, c.input(0), g, Tensor()) : Tensor()};
  }
  // dgw = W(tx, gy) + W(x, tgy)
  static constexpr bool jvp_undefined_is_zero = true;
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor& tgy) const {
    const Tensor t =
        sum_defined(tx.defined() ? apply_conv_weight_grad(a, kernel, tx, c.input(1)) : Tensor(),
                    tgy.defined() ? apply_conv_weight_grad(a, kernel, c.input(0), tgy) : Tensor());
    return t.defined() ? t : zeros_like(c.output());
  }
  // Batching: the examples become groups of one problem (x as [N, B C, *], gy as [N, B O, *]),
  // whose weight gradient [B O, C/g, *k] is the examples' stacked.
  Tensor vmap(const BatchArgs& b) const {
    const int64_t n = b.size();
    const Tensor gw =
        apply_conv_weight_grad(a.times_groups(n), kernel, batch_into_channels(b.with_batch(0)),
                               batch_into_channels(b.with_batch(1)));
    return unfold_batch(gw, n);
  }
};

}  // namespace

Tensor apply_convolution(const ConvAttrs& a, const Tensor& x, const Tensor& w, const Tensor& b) {
  return apply(Convolution{a}, x, w, b);
}
Tensor apply_conv_transpose(const ConvAttrs& a, const std::vector<int64_t>& in_size,
                            const Tensor& gy, const Tensor& w, const Tensor& b) {
  return apply(ConvTranspose{a, in_size}, gy, w, b);
}
Tensor apply_conv_weight_grad(const ConvAttrs& a, const std::vector<int64_t>& kernel,
                              const Tensor& x, const Tensor& gy) {
  return apply(ConvWeightGrad{a, kernel}, x, gy);
}

}  // namespace detail
}  // namespace adjoint

ADJOINT_OPS_FILE(conv)
