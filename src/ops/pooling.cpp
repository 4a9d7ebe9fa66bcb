// Pooling ops: max, average and adaptive pooling (1-d through 2-d with a height of 1). Five op
// structs, all working on the trailing two dims of any number of leading ones (so a batching
// rule only adds a leading dim):
//   max_pool_indices  the window maxima's indices (int64, not differentiable);
//   pool_gather       x at those indices: max pooling's values. Linear in x, and
//   pool_scatter      its transpose: each is the other's VJP, so max pooling differentiates to
//                     any order (the indices stay fixed, as the maxima do near a point
//                     without ties);
//   avg_pool          window means (adaptive ones too), linear, and
//   avg_pool_backward its transpose, each the other's VJP.
// Autocast: none of them has a policy, so they follow their input's dtype (pooling is exact
// for max, and a mean of a window of 16-bit values is computed in float32 by the kernel).
#include <algorithm>

#include "adjoint/error.h"
#include "adjoint/pooling.h"
#include "backend/pool_kernels.h"
#include "core/op_fields.h"
#include "ops/common.h"
#include "ops/pool_backward.h"

namespace adjoint {
namespace {

// Output size of a pooling window sweep, as PyTorch's pooling_output_shape.
int64_t pooled_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1 + (ceil ? stride - 1 : 0);
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  // With ceil_mode the last window must start inside the input or its left padding.
  if (ceil && (out - 1) * stride >= in + pad) --out;
  return out;
}

/// Everything a pooling op needs besides its input: the kernel, stride, padding and dilation
/// (h, w), or for adaptive pooling the output size, and average pooling's divisor rules.
struct PoolGeometry {
  std::vector<int64_t> kernel{1, 1}, stride{1, 1}, padding{0, 0}, dilation{1, 1};
  bool ceil_mode = false;
  bool adaptive = false;
  std::vector<int64_t> output{1, 1};  // adaptive only
  bool count_include_pad = true;
  int64_t divisor_override = 0;  // 0: none
  auto fields() {
    return std::tie(kernel, stride, padding, dilation, ceil_mode, adaptive, output,
                    count_include_pad, divisor_override);
  }

  int64_t out_size(int64_t d, int64_t in) const {
    return adaptive ? output[d]
                    : pooled_size(in, kernel[d], padding[d], stride[d], dilation[d], ceil_mode);
  }

  kernels::PoolAxis axis(int64_t d, int64_t in, bool max) const {
    kernels::PoolAxis a;
    a.in = in;
    const int64_t n = out_size(d, in);
    for (int64_t o = 0; o < n; ++o) {
      int64_t start, count, padded;
      if (adaptive) {  // PyTorch's start_index and end_index
        start = o * in / n;
        const int64_t end = ((o + 1) * in + n - 1) / n;
        count = padded = end - start;
      } else if (max) {
        const int64_t dil = dilation[d];
        start = o * stride[d] - padding[d];
        const int64_t end = std::min(start + (kernel[d] - 1) * dil + 1, in);
        while (start < 0) start += dil;
        count = start < end ? (end - start + dil - 1) / dil : 0;
        padded = count;
        a.step = dil;
      } else {  // avg_pool2d's window: clipped at the padding, then at the input
        start = o * stride[d] - padding[d];
        int64_t end = std::min(start + kernel[d], in + padding[d]);
        padded = end - start;
        start = std::max<int64_t>(start, 0);
        end = std::min(end, in);
        count = std::max<int64_t>(end - start, 0);
      }
      a.start.push_back(start);
      a.count.push_back(count);
      a.padded.push_back(padded);
    }
    return a;
  }

  /// Throws naming `op` unless the attributes are ones the public functions make: two of each
  /// size, positive kernels, strides, dilations and adaptive outputs, padding in [0, k / 2].
  void check(const char* op) const {
    bool ok = kernel.size() == 2 && stride.size() == 2 && padding.size() == 2 &&
              dilation.size() == 2 && output.size() == 2;
    for (int d = 0; ok && d < 2; ++d)
      ok = kernel[d] >= 1 && stride[d] >= 1 && dilation[d] >= 1 && output[d] >= 1 &&
           padding[d] >= 0 && padding[d] <= kernel[d] / 2;
    ADJOINT_CHECK(ok, Value, op, "invalid pooling attributes: kernel ", Shape(kernel), ", stride ",
                  Shape(stride), ", padding ", Shape(padding), ", dilation ", Shape(dilation),
                  ", output ", Shape(output));
  }
  /// The output shape for an input of `shape` ([..., H, W], H and W positive), checked to
  /// have at least one element per spatial dim.
  Shape output_shape(const Shape& shape, const char* op) const {
    check(op);
    ADJOINT_CHECK(shape.size() >= 2 && shape[shape.size() - 2] > 0 && shape[shape.size() - 1] > 0,
                  Shape, op, "expected an input [..., H, W] with H and W positive, got ", shape);
    Shape out = shape;
    for (int d = 0; d < 2; ++d) {
      const std::size_t i = shape.size() - 2 + static_cast<std::size_t>(d);
      out[i] = out_size(d, shape[i]);
      ADJOINT_CHECK(out[i] >= 1, Shape, op, "the output size ", out, " is too small: kernel size ",
                    Shape(kernel), " with dilation ", Shape(dilation), " does not fit the input ",
                    shape, " with padding ", Shape(padding));
    }
    return out;
  }

  kernels::PoolWindows windows(int64_t h, int64_t w, bool max) const {
    kernels::PoolWindows win;
    win.h = axis(0, h, max);
    win.w = axis(1, w, max);
    win.include_pad = count_include_pad;
    win.divisor_override = divisor_override;
    return win;
  }
};

Shape spatial_of(const Shape& s) { return Shape{s[s.size() - 2], s[s.size() - 1]}; }

// infer (Note [Checking an imported graph] in src/export/import.cpp): a floating input.
const detail::ValueSpec& floating_spec(std::span<const detail::ValueSpec> in, std::size_t i,
                                       const char* op) {
  const detail::ValueSpec& v = spec_of(in, i, op);
  ADJOINT_CHECK(is_floating(v.dtype), DType, op, "expected a floating tensor, got ", describe(v));
  return v;
}

// infer of pool_gather and pool_scatter: int64 indices [lead..., O...] and values whose
// leading dims are the indices' (values shaped as the indices when `same`).
void check_indexed(const detail::ValueSpec& v, const detail::ValueSpec& index, bool same,
                   const char* op) {
  bool ok =
      index.dtype == DType::Int64 && v.shape.size() == index.shape.size() && v.shape.size() >= 2;
  for (std::size_t d = 0; ok && d < v.shape.size(); ++d)
    ok = (d + 2 >= v.shape.size() && !same) || v.shape[d] == index.shape[d];
  ADJOINT_CHECK(ok, Shape, op, "values ", describe(v), " and int64 indices ", describe(index),
                " must share their leading dims", same ? " and their planes" : "");
}

Tensor gather_at(const Tensor& x, const Tensor& index);
Tensor scatter_at(const Tensor& g, const Tensor& index, const Shape& plane);
Tensor avg_pool_op(const Tensor& x, const PoolGeometry& geo);
Tensor avg_pool_backward_op(const Tensor& g, const PoolGeometry& geo, const Shape& plane);

struct MaxPoolIndices {
  static constexpr const char* name = "max_pool_indices";
  auto fields() { return std::tie(geo); }
  static constexpr Save save = Save::None;
  PoolGeometry geo;
  Tensor forward(const Tensor& x) const {
    return kernels::max_pool_indices(x, geo.windows(x.size(-2), x.size(-1), true));
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return {geo.output_shape(floating_spec(in, 0, name).shape, name), DType::Int64};
  }
  // Integer indices: nothing to differentiate (apply records no node for them).
  Tensor vjp(const Ctx&, const Tensor&) const { return Tensor(); }
  Tensor jvp(const Ctx&, const Tensor&) const { return Tensor(); }
  // Batching: the batch dim is one more leading dim.
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b[0]); }
};

// y[p, k] = x[p, index[p, k]] over each plane p (the trailing two dims flattened).
struct PoolGather {
  static constexpr const char* name = "pool_gather";
  static constexpr Save save = Save::None;
  Tensor forward(Saver& s, const Tensor& x, const Tensor& index) const {
    s.save(index);
    return kernels::pool_gather(x, index, 2, name);
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& x = floating_spec(in, 0, name);
    const detail::ValueSpec& index = spec_of(in, 1, name);
    check_indexed(x, index, false, name);
    return {index.shape, x.dtype};
  }
  // d/dx: the cotangent scattered (added) to the indices
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    return {scatter_at(gy, c.saved(0), spatial_of(c.input_shape(0))), Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor&) const {
    return gather_at(tx, c.saved(0));
  }
  Tensor vmap(const BatchArgs& b, Saver& s) const {
    s.save(b.logical(1));
    return apply(*this, b.with_batch(0), b.with_batch(1));
  }
};

// y = zeros(plane) with g[p, k] added at index[p, k]: pool_gather's transpose.
struct PoolScatter {
  static constexpr const char* name = "pool_scatter";
  auto fields() { return std::tie(plane); }
  static constexpr Save save = Save::None;
  Shape plane;  // the trailing (H, W) of the result
  Tensor forward(Saver& s, const Tensor& g, const Tensor& index) const {
    s.save(index);
    return kernels::pool_scatter(g, index, plane, name);
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& g = floating_spec(in, 0, name);
    const detail::ValueSpec& index = spec_of(in, 1, name);
    check_indexed(g, index, true, name);
    ADJOINT_CHECK(plane.size() == 2 && plane[0] > 0 && plane[1] > 0, Shape, name, "plane ", plane,
                  " must have two positive dims");
    Shape out = g.shape;
    out[out.size() - 2] = plane[0];
    out[out.size() - 1] = plane[1];
    return {out, g.dtype};
  }
  // d/dg: the cotangent gathered at the indices
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& ct) const {
    return {gather_at(ct, c.saved(0)), Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& tg, const Tensor&) const {
    return scatter_at(tg, c.saved(0), plane);
  }
  Tensor vmap(const BatchArgs& b, Saver& s) const {
    s.save(b.logical(1));
    return apply(*this, b.with_batch(0), b.with_batch(1));
  }
};

// y = window sums / divisors: linear, so its VJP is its transpose and its JVP itself.
struct AvgPool {
  static constexpr const char* name = "avg_pool";
  auto fields() { return std::tie(geo); }
  static constexpr Save save = Save::None;
  PoolGeometry geo;
  Tensor forward(const Tensor& x) const {
    return kernels::avg_pool(x, geo.windows(x.size(-2), x.size(-1), false));
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& x = floating_spec(in, 0, name);
    return {geo.output_shape(x.shape, name), x.dtype};
  }
  // d/dx: each output's cotangent / divisor spread over its window (avg_pool_backward)
  Tensor vjp(const Ctx& c, const Tensor& gy) const {
    return avg_pool_backward_op(gy, geo, spatial_of(c.input_shape(0)));
  }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return avg_pool_op(tx, geo); }
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b[0]); }
};

// avg_pool's transpose, g [..., OH, OW] to [..., H, W]; its VJP is avg_pool.
struct AvgPoolBackward {
  static constexpr const char* name = "avg_pool_backward";
  auto fields() { return std::tie(geo, plane); }
  static constexpr Save save = Save::None;
  PoolGeometry geo;
  Shape plane;  // the input's (H, W)
  Tensor forward(const Tensor& g) const {
    return kernels::avg_pool_backward(g, geo.windows(plane[0], plane[1], false));
  }
  // g [..., OH, OW] for an input [..., H, W] (plane = {H, W}).
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& g = floating_spec(in, 0, name);
    ADJOINT_CHECK(g.shape.size() >= 2 && plane.size() == 2, Shape, name, "gradient ", describe(g),
                  " and plane ", plane, " must have two spatial dims");
    Shape x = g.shape;
    x[x.size() - 2] = plane[0];
    x[x.size() - 1] = plane[1];
    ADJOINT_CHECK(geo.output_shape(x, name) == g.shape, Shape, name, "gradient ", describe(g),
                  " is not avg_pool's output for an input ", x);
    return {x, g.dtype};
  }
  // d/dg: avg_pool of the cotangent
  Tensor vjp(const Ctx&, const Tensor& ct) const { return avg_pool_op(ct, geo); }
  Tensor jvp(const Ctx&, const Tensor& tg) const { return avg_pool_backward_op(tg, geo, plane); }
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b[0]); }
};

Tensor gather_at(const Tensor& x, const Tensor& index) { return apply(PoolGather{}, x, index); }
Tensor scatter_at(const Tensor& g, const Tensor& index, const Shape& plane) {
  return apply(PoolScatter{plane}, g, index);
}
Tensor avg_pool_op(const Tensor& x, const PoolGeometry& geo) { return apply(AvgPool{geo}, x); }
Tensor avg_pool_backward_op(const Tensor& g, const PoolGeometry& geo, const Shape& plane) {
  return apply(AvgPoolBackward{geo, plane}, g);
}

// ---- argument checks, as PyTorch's pool2d_shape_check ----

// A size list of one value (for every spatial dim) or `dims` values, each checked.
std::vector<int64_t> expand_list(const std::vector<int64_t>& v, std::size_t dims, const char* what,
                                 int64_t min, const char* op) {
  ADJOINT_CHECK(v.size() == 1 || v.size() == dims, Value, op, what, " must be one int or ", dims,
                " ints, got ", v.size(), " values");
  std::vector<int64_t> out = v.size() == 1 ? std::vector<int64_t>(dims, v[0]) : v;
  for (int64_t x : out)
    ADJOINT_CHECK(x >= min, Value, op, what, " must be ", min == 0 ? "non-negative" : "positive",
                  ", got ", Shape(out));
  return out;
}

// x as [planes..., H, W] (a 1-d op's [.., L] gains a height of 1), after checking its rank:
// `spatial` trailing dims after a channel dim, with an optional batch dim; every dim but the
// batch dim non-empty.
Tensor pooling_input(const Tensor& x_in, int64_t spatial, const char* op) {
  ADJOINT_CHECK(x_in.defined(), Value, op, "got an undefined input");
  const int64_t r = x_in.dim();
  ADJOINT_CHECK(r == spatial + 1 || r == spatial + 2, Shape, op, "expected a ", spatial + 1,
                "-d (unbatched) or ", spatial + 2, "-d (batched) input, got ", describe(x_in));
  for (int64_t d = r == spatial + 2 ? 1 : 0; d < r; ++d)
    ADJOINT_CHECK(x_in.shape()[d] > 0, Shape, op,
                  "expected non-empty channel and spatial dims (only the batch dim may be 0), "
                  "got ",
                  describe(x_in));
  Tensor x = to_floating(x_in);
  return spatial == 1 ? x.unsqueeze(-2) : x;
}

// The geometry of a windowed pooling, checked (sizes, padding at most half the kernel, an
// output of at least one element) against the [.., H, W] input x.
PoolGeometry window_geometry(const Tensor& x, const std::vector<int64_t>& kernel,
                             const std::vector<int64_t>& stride, const std::vector<int64_t>& pad,
                             const std::vector<int64_t>& dil, bool ceil_mode, const char* op) {
  PoolGeometry g;
  g.kernel = kernel;
  g.stride = stride.empty() ? kernel : stride;
  g.padding = pad;
  g.dilation = dil;
  g.ceil_mode = ceil_mode;
  for (int d = 0; d < 2; ++d)
    ADJOINT_CHECK(g.padding[d] <= g.kernel[d] / 2, Value, op,
                  "padding should be at most half the kernel size, got padding ", Shape(g.padding),
                  " with kernel size ", Shape(g.kernel));
  const int64_t oh = g.out_size(0, x.size(-2)), ow = g.out_size(1, x.size(-1));
  ADJOINT_CHECK(oh >= 1 && ow >= 1, Shape, op, "the output size (", oh, ", ", ow,
                ") is too small: kernel size ", Shape(g.kernel), " with dilation ",
                Shape(g.dilation), " does not fit the input ", describe(x), " with padding ",
                Shape(g.padding));
  return g;
}

// The batched or unbatched result of a 1-d op: its height of 1 removed again.
Tensor unflatten_1d(const Tensor& y, int64_t spatial) { return spatial == 1 ? y.squeeze(-2) : y; }

std::pair<Tensor, Tensor> max_pool(const Tensor& x_in, int64_t spatial,
                                   const std::vector<int64_t>& kernel,
                                   const std::vector<int64_t>& stride,
                                   const std::vector<int64_t>& pad, const std::vector<int64_t>& dil,
                                   bool ceil_mode, const char* op) {
  const Tensor x = pooling_input(x_in, spatial, op);
  const PoolGeometry g = window_geometry(x, kernel, stride, pad, dil, ceil_mode, op);
  const Tensor index = apply(MaxPoolIndices{g}, x);
  return {unflatten_1d(gather_at(x, index), spatial), unflatten_1d(index, spatial)};
}

// A 1-d op's arguments as 2-d ones with a height of one.
std::vector<int64_t> as_2d(int64_t v, int64_t h) { return {h, v}; }

}  // namespace

std::pair<Tensor, Tensor> max_pool1d_with_indices(const Tensor& x, int64_t kernel_size,
                                                  std::optional<int64_t> stride, int64_t padding,
                                                  int64_t dilation, bool ceil_mode) {
  const char* op = "max_pool1d";
  const auto k = expand_list({kernel_size}, 1, "kernel_size", 1, op);
  const auto s = stride ? expand_list({*stride}, 1, "stride", 1, op) : k;
  const auto p = expand_list({padding}, 1, "padding", 0, op);
  const auto d = expand_list({dilation}, 1, "dilation", 1, op);
  return max_pool(x, 1, as_2d(k[0], 1), as_2d(s[0], 1), as_2d(p[0], 0), as_2d(d[0], 1), ceil_mode,
                  op);
}

Tensor max_pool1d(const Tensor& x, int64_t kernel_size, std::optional<int64_t> stride,
                  int64_t padding, int64_t dilation, bool ceil_mode) {
  return max_pool1d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode).first;
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, std::vector<int64_t> kernel_size,
                                                  std::vector<int64_t> stride,
                                                  std::vector<int64_t> padding,
                                                  std::vector<int64_t> dilation, bool ceil_mode) {
  const char* op = "max_pool2d";
  const auto k = expand_list(kernel_size, 2, "kernel_size", 1, op);
  const auto s = stride.empty() ? k : expand_list(stride, 2, "stride", 1, op);
  return max_pool(x, 2, k, s, expand_list(padding, 2, "padding", 0, op),
                  expand_list(dilation, 2, "dilation", 1, op), ceil_mode, op);
}

Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel_size, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, std::vector<int64_t> dilation, bool ceil_mode) {
  return max_pool2d_with_indices(x, std::move(kernel_size), std::move(stride), std::move(padding),
                                 std::move(dilation), ceil_mode)
      .first;
}

namespace {

Tensor avg_pool(const Tensor& x_in, int64_t spatial, const std::vector<int64_t>& kernel,
                const std::vector<int64_t>& stride, const std::vector<int64_t>& pad, bool ceil_mode,
                bool count_include_pad, std::optional<int64_t> divisor, const char* op) {
  ADJOINT_CHECK(!divisor || *divisor != 0, Value, op, "divisor_override must not be zero");
  const Tensor x = pooling_input(x_in, spatial, op);
  PoolGeometry g = window_geometry(x, kernel, stride, pad, {1, 1}, ceil_mode, op);
  g.count_include_pad = count_include_pad;
  g.divisor_override = divisor.value_or(0);
  return unflatten_1d(avg_pool_op(x, g), spatial);
}

PoolGeometry adaptive_geometry(const Tensor& x, const std::vector<int64_t>& output_size,
                               const char* op) {
  PoolGeometry g;
  g.adaptive = true;
  g.output = expand_list(output_size, 2, "output_size", 1, op);
  return g;
}

}  // namespace

Tensor avg_pool1d(const Tensor& x, int64_t kernel_size, std::optional<int64_t> stride,
                  int64_t padding, bool ceil_mode, bool count_include_pad) {
  const char* op = "avg_pool1d";
  const auto k = expand_list({kernel_size}, 1, "kernel_size", 1, op);
  const auto s = stride ? expand_list({*stride}, 1, "stride", 1, op) : k;
  const auto p = expand_list({padding}, 1, "padding", 0, op);
  return avg_pool(x, 1, as_2d(k[0], 1), as_2d(s[0], 1), as_2d(p[0], 0), ceil_mode,
                  count_include_pad, std::nullopt, op);
}

Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel_size, std::vector<int64_t> stride,
                  std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad,
                  std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool2d";
  const auto k = expand_list(kernel_size, 2, "kernel_size", 1, op);
  const auto s = stride.empty() ? k : expand_list(stride, 2, "stride", 1, op);
  return avg_pool(x, 2, k, s, expand_list(padding, 2, "padding", 0, op), ceil_mode,
                  count_include_pad, divisor_override, op);
}

Tensor adaptive_avg_pool2d(const Tensor& x_in, std::vector<int64_t> output_size) {
  const char* op = "adaptive_avg_pool2d";
  const Tensor x = pooling_input(x_in, 2, op);
  return avg_pool_op(x, adaptive_geometry(x, output_size, op));
}

std::pair<Tensor, Tensor> adaptive_max_pool2d_with_indices(const Tensor& x_in,
                                                           std::vector<int64_t> output_size) {
  const char* op = "adaptive_max_pool2d";
  const Tensor x = pooling_input(x_in, 2, op);
  const PoolGeometry g = adaptive_geometry(x, output_size, op);
  const Tensor index = apply(MaxPoolIndices{g}, x);
  return {gather_at(x, index), index};
}

Tensor adaptive_max_pool2d(const Tensor& x, std::vector<int64_t> output_size) {
  return adaptive_max_pool2d_with_indices(x, std::move(output_size)).first;
}

Tensor max_pool2d_backward(const Tensor& gy, const Tensor& indices, const Shape& plane) {
  const char* op = "max_pool2d_backward";
  ADJOINT_CHECK(gy.defined() && indices.defined(), Value, op, "got an undefined tensor");
  ADJOINT_CHECK(indices.dtype() == DType::Int64, DType, op, "indices must be int64, got ",
                describe(indices));
  ADJOINT_CHECK(gy.dim() >= 2 && gy.shape() == indices.shape() && plane.size() == 2 &&
                    plane[0] > 0 && plane[1] > 0,
                Shape, op, "gradient ", describe(gy), " and indices ", describe(indices),
                " must have one shape [..., OH, OW], and the plane ", plane, " two positive dims");
  return scatter_at(to_floating(gy), indices, plane);
}

Tensor avg_pool2d_backward(const Tensor& gy, const Shape& input_shape,
                           std::vector<int64_t> kernel_size, std::vector<int64_t> stride,
                           std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad,
                           std::optional<int64_t> divisor_override) {
  const char* op = "avg_pool2d_backward";
  ADJOINT_CHECK(gy.defined(), Value, op, "got an undefined gradient");
  ADJOINT_CHECK(!divisor_override || *divisor_override != 0, Value, op,
                "divisor_override must not be zero");
  // The geometry is checked against a stand-in of the input's shape (no data is read).
  const Tensor x = pooling_input(zeros({}, to_floating(gy).dtype()).expand(input_shape), 2, op);
  const auto k = expand_list(kernel_size, 2, "kernel_size", 1, op);
  const auto s = stride.empty() ? k : expand_list(stride, 2, "stride", 1, op);
  PoolGeometry g =
      window_geometry(x, k, s, expand_list(padding, 2, "padding", 0, op), {1, 1}, ceil_mode, op);
  g.count_include_pad = count_include_pad;
  g.divisor_override = divisor_override.value_or(0);
  Shape out = input_shape;
  out[out.size() - 2] = g.out_size(0, x.size(-2));
  out[out.size() - 1] = g.out_size(1, x.size(-1));
  ADJOINT_CHECK(gy.shape() == out, Shape, op, "gradient ", describe(gy),
                " must have avg_pool2d's output shape ", out, " for input shape ", input_shape);
  return avg_pool_backward_op(to_floating(gy), g, spatial_of(input_shape));
}

}  // namespace adjoint

ADJOINT_OPS_FILE(pooling)
