// The meta device's kernels of the layer families (attention, convolution, normalization,
// pooling, losses) and of linear algebra: each CPU kernel's result shapes and dtypes.
#include "adjoint/error.h"
#include "backend/device_kernels.h"
#include "backend/meta/meta_util.h"
#include "core/dispatch.h"

namespace adjoint::kernels::meta {
namespace {

// float32 for every floating dtype but float64: what the attention kernel keeps per row.
DType statistics_dtype(DType x) { return x == DType::Float64 ? DType::Float64 : DType::Float32; }

// The planes of a pooling: every dim but the last two, then (oh, ow).
Shape with_plane(const Shape& shape, int64_t oh, int64_t ow) {
  return with_tail(shape, 2, {oh, ow});
}

// Checks a floating dtype as the LAPACK kernels do (the same error), then gives f's result.
template <class F>
auto floating(const Tensor& a, const char* op, F&& f) {
  return dispatch_opmath_floating(a.dtype(), op, [&]<class T>() { return f(); });
}

}  // namespace

// ---- attention ----
AttentionForward attention_forward(const Tensor& q, const Tensor&, const Tensor& v, const Tensor&,
                                   const Tensor&, const AttentionSpec&) {
  const Shape rows = with_tail(q.shape(), 1, {});
  const Shape out = with_tail(q.shape(), 1, {v.shape().back()});
  // The CPU kernel's layout (Note [Attention output layout]): float32 and float64 outputs are
  // the transposed view of [*b, L, Hq, Ev] storage, 16-bit ones contiguous.
  if (q.dtype() != DType::Float32 && q.dtype() != DType::Float64)
    return {result(out, q.dtype()), result(rows, statistics_dtype(q.dtype()))};
  const int64_t nd = static_cast<int64_t>(out.size());
  Shape rows_first = out;
  std::swap(rows_first[nd - 3], rows_first[nd - 2]);
  return {result(rows_first, q.dtype()).transpose(nd - 3, nd - 2),
          result(rows, statistics_dtype(q.dtype()))};
}
Tensor attention_backward(const Tensor&, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const AttentionSpec&) {
  return result({q.numel() + k.numel() + v.numel()}, q.dtype());
}
Tensor attention_dropout_scale(const Tensor&, const Shape& scores, double, DType dtype) {
  return result(scores, dtype);
}

// ---- convolution ----
Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor&, const ConvGeometry& g,
                    ConvPath) {
  const std::size_t spatial = x.shape().size() - 2;
  Shape shape{x.shape()[0], w.shape()[0]};
  for (std::size_t j = 0; j < spatial; ++j)
    shape.push_back(conv_output_size(x.shape()[j + 2], w.shape()[j + 2], g.stride[j], g.pad_l[j],
                                     g.pad_r[j], g.dilation[j]));
  return result(shape, x.dtype());
}
Tensor conv_backward_data(const Tensor& gy, const Tensor&, const ConvGeometry&,
                          const Shape& input_shape, ConvPath) {
  return result(input_shape, gy.dtype());
}
Tensor conv_backward_weight(const Tensor& x, const Tensor&, const ConvGeometry&,
                            const Shape& weight_shape, ConvPath) {
  return result(weight_shape, x.dtype());
}

// ---- losses and layer norm ----
void check_class_targets(const Tensor&, int64_t, int64_t, const char*) {}  // values: none here
CrossEntropyForward cross_entropy(const Tensor& logits, const Tensor&, int64_t) {
  // Which rows are ignored is data; every row counts, so a mean divides by N.
  const int64_t rows = logits.shape()[0];
  return {result({rows}, logits.dtype()), result({rows}, logits.dtype()), rows};
}
Tensor cross_entropy_backward(const Tensor&, const Tensor& logits, const Tensor&, int64_t) {
  return result(logits.shape(), logits.dtype());
}
LayerNormForward layer_norm(const Tensor& x, int64_t normalized_dims, const Tensor&, const Tensor&,
                            double) {
  Shape stats = x.shape();
  for (int64_t i = x.dim() - normalized_dims; i < x.dim(); ++i) stats[i] = 1;
  return {result(x.shape(), x.dtype()), result(stats, x.dtype()), result(stats, x.dtype())};
}
Tensor layer_norm_backward(const Tensor&, const Tensor& x, const Tensor&, const Tensor&,
                           const Tensor&, int64_t) {
  return result(x.shape(), x.dtype());
}

// ---- lstm cell ----
Tensor lstm_cell(const Tensor&, const Tensor& c) {
  Shape out = c.shape();
  out.insert(0, 2);
  return result(out, c.dtype());
}
Tensor lstm_cell_backward(const Tensor&, const Tensor& gates, const Tensor& c) {
  return result({gates.numel() + c.numel()}, c.dtype());
}

LstmSequenceForward lstm_sequence(const Tensor& xp, const Tensor&, const Tensor& h0, const Tensor&,
                                  bool) {
  const int64_t steps = xp.shape()[0], batch = h0.shape()[0], hidden = h0.shape()[1];
  return {result({2, steps, batch, hidden}, xp.dtype()), result(xp.shape(), xp.dtype())};
}
Tensor lstm_sequence_backward(const Tensor&, const Tensor& gates, const Tensor&, const Tensor& c0,
                              const Tensor&, bool) {
  return result({gates.numel() + 2 * c0.numel()}, gates.dtype());
}

// ---- batch and group norm ----
Tensor batch_norm_moments(const Tensor& x, int64_t) { return result({2, x.shape()[1]}, x.dtype()); }
BatchNormForward batch_norm(const Tensor& x, const Tensor&, const Tensor&, double) {
  const int64_t c = x.shape()[1];
  return {result(x.shape(), x.dtype()), result({c}, x.dtype()), result({c}, x.dtype())};
}
Tensor batch_norm_backward(const Tensor&, const Tensor& x, const Tensor&, const Tensor&,
                           const Tensor&) {
  return result(x.shape(), x.dtype());
}
GroupNormForward group_norm(const Tensor& x, int64_t groups, const Tensor&, const Tensor&, double) {
  const int64_t n = x.shape()[0];
  return {result(x.shape(), x.dtype()), result({n, groups}, x.dtype()),
          result({n, groups}, x.dtype())};
}

// ---- pooling and im2col ----
Tensor max_pool_indices(const Tensor& x, const PoolWindows& win) {
  return result(with_plane(x.shape(), win.h.out(), win.w.out()), DType::Int64);
}
Tensor avg_pool(const Tensor& x, const PoolWindows& win) {
  return result(with_plane(x.shape(), win.h.out(), win.w.out()), x.dtype());
}
Tensor avg_pool_backward(const Tensor& g, const PoolWindows& win) {
  return result(with_plane(g.shape(), win.h.in, win.w.in), g.dtype());
}
Tensor pool_gather(const Tensor& x, const Tensor& index, int64_t, const char*) {
  return result(index.shape(), x.dtype());
}
Tensor pool_scatter(const Tensor& g, const Tensor& index, const Shape& plane, const char* op) {
  ADJOINT_CHECK(index.dtype() == DType::Int64, DType, op, "indices must be int64, got ",
                describe(index));
  return result(with_tail(g.shape(), plane.size(), plane), g.dtype());
}
Tensor im2col(const Tensor& x, const Im2ColGeometry& geo) {
  const Shape& s = x.shape();
  return result({s[0], s[1] * geo.kh * geo.kw, geo.out_h(s[2]) * geo.out_w(s[3])}, x.dtype());
}
Tensor col2im(const Tensor& cols, const Im2ColGeometry& geo, int64_t h, int64_t w) {
  const int64_t c = cols.shape()[1] / (geo.kh * geo.kw);
  return result({cols.shape()[0], c, h, w}, cols.dtype());
}

// ---- linear algebra ----
Tensor lu_solve(const Tensor& a, const Tensor& b, const char* op) {
  return floating(a, op, [&] { return result(b.shape(), a.dtype()); });
}
Tensor triangular_solve(const Tensor& a, const Tensor& b, bool, bool, const char* op) {
  return floating(a, op, [&] { return result(b.shape(), a.dtype()); });
}
Tensor cholesky(const Tensor& a, const char* op) {
  return floating(a, op, [&] { return result(a.shape(), a.dtype()); });
}
LuDet lu_det(const Tensor& a, const char* op) {
  return floating(a, op, [&] {
    const Shape batch = with_tail(a.shape(), 2, {});
    return LuDet{result(batch, a.dtype()), result(batch, a.dtype()), result(batch, a.dtype())};
  });
}
Tensor det_cofactors(const Tensor& a, double, const char* op) {
  return floating(a, op, [&] { return result(a.shape(), a.dtype()); });
}
Eigh eigh(const Tensor& a, bool vectors, const char* op) {
  return floating(a, op, [&] {
    Eigh r;
    r.values = result(with_tail(a.shape(), 1, {}), a.dtype());
    if (vectors) r.vectors = result(a.shape(), a.dtype());
    return r;
  });
}
Qr qr(const Tensor& a, const char* op) {
  return floating(a, op, [&] {
    const int64_t m = a.shape()[a.dim() - 2], n = a.shape().back(), k = std::min(m, n);
    return Qr{result(with_tail(a.shape(), 2, {m, k}), a.dtype()),
              result(with_tail(a.shape(), 2, {k, n}), a.dtype())};
  });
}
Svd svd(const Tensor& a, bool vectors, const char* op) {
  return floating(a, op, [&] {
    const int64_t m = a.shape()[a.dim() - 2], n = a.shape().back(), k = std::min(m, n);
    Svd r;
    r.s = result(with_tail(a.shape(), 2, {k}), a.dtype());
    if (vectors) {
      r.u = result(with_tail(a.shape(), 2, {m, k}), a.dtype());
      r.vh = result(with_tail(a.shape(), 2, {k, n}), a.dtype());
    }
    return r;
  });
}

}  // namespace adjoint::kernels::meta
