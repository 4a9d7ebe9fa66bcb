// Resampling: pad, interpolate, pixel_shuffle/pixel_unshuffle and unfold/fold.
// - pad and interpolate are composites of differentiable ops on constant index tensors built
//   from shapes alone (so they trace under compile and batch under vmap through their ops'
//   rules): constant padding is cat with filled blocks (negative pads slice), reflect,
//   replicate and circular padding pick rows with index_select (whose VJP index_add accumulates
//   the mirrored or repeated rows), nearest interpolation is index_select per dim, and linear
//   interpolation is two index_selects weighted per dim, W before H (so a bilinear output is
//   h0 (w0 x00 + w1 x01) + h1 (w0 x10 + w1 x11), PyTorch's order).
// - pixel_shuffle and pixel_unshuffle are reshape, permute, reshape.
// - unfold (im2col) and fold (col2im) are one op each on their kernels; both are linear and each
//   is the other's transpose, so each one's VJP is the other.
#include <cmath>

#include "adjoint/error.h"
#include "adjoint/pooling.h"
#include "backend/pool_kernels.h"
#include "core/op_fields.h"
#include "ops/common.h"

namespace adjoint {
namespace {

// ---- unfold / fold ----

/// kernel, dilation, padding and stride (h, w) of unfold and fold.
struct BlockGeometry {
  std::vector<int64_t> kernel, dilation, padding, stride;
  auto fields() { return std::tie(kernel, dilation, padding, stride); }
  /// Throws naming `op` unless the attributes are ones the public functions make.
  void check(const char* op) const {
    bool ok =
        kernel.size() == 2 && dilation.size() == 2 && padding.size() == 2 && stride.size() == 2;
    for (int d = 0; ok && d < 2; ++d)
      ok = kernel[d] >= 1 && dilation[d] >= 1 && padding[d] >= 0 && stride[d] >= 1;
    ADJOINT_CHECK(ok, Value, op, "invalid block attributes: kernel ", Shape(kernel), ", dilation ",
                  Shape(dilation), ", padding ", Shape(padding), ", stride ", Shape(stride));
  }
  kernels::Im2ColGeometry im2col() const {
    return {kernel[0],  kernel[1],  stride[0],   stride[1],
            padding[0], padding[1], dilation[0], dilation[1]};
  }
};

std::pair<int64_t, int64_t> block_counts(const BlockGeometry& g, int64_t h, int64_t w,
                                         const char* op);
Tensor unfold_op(const Tensor& x, const BlockGeometry& g);
Tensor fold_op(const Tensor& cols, const BlockGeometry& g, const Shape& plane);

// x [N, C, H, W] to its blocks [N, C kh kw, L]; [B, N, ...] under vmap folds B into N.
struct Unfold {
  static constexpr const char* name = "unfold";
  auto fields() { return std::tie(geo); }
  static constexpr Save save = Save::None;
  BlockGeometry geo;
  Tensor forward(const Tensor& x) const { return kernels::im2col(x, geo.im2col()); }
  // infer (Note [Checking an imported graph] in src/export/import.cpp): x [N, C, H, W].
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& x = spec_of(in, 0, name);
    geo.check(name);
    ADJOINT_CHECK(x.shape.size() == 4 && is_floating(x.dtype), Shape, name,
                  "expected a floating input [N, C, H, W], got ", describe(x));
    const auto [bh, bw] = block_counts(geo, x.shape[2], x.shape[3], name);
    return {Shape{x.shape[0], x.shape[1] * geo.kernel[0] * geo.kernel[1], bh * bw}, x.dtype};
  }
  // d/dx: the cotangent's blocks summed back into place (fold)
  Tensor vjp(const Ctx& c, const Tensor& gy) const {
    const Shape& s = c.input_shape(0);
    return fold_op(gy, geo, Shape{s[2], s[3]});
  }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return unfold_op(tx, geo); }
  Tensor vmap(const BatchArgs& b) const {
    const Tensor& x = b[0];  // [B, N, C, H, W]
    const Tensor y =
        apply(*this, x.reshape({x.size(0) * x.size(1), x.size(2), x.size(3), x.size(4)}));
    return y.reshape({x.size(0), x.size(1), y.size(1), y.size(2)});
  }
};

// cols [N, C kh kw, L] summed into [N, C, H, W].
struct Fold {
  static constexpr const char* name = "fold";
  auto fields() { return std::tie(geo, plane); }
  static constexpr Save save = Save::None;
  BlockGeometry geo;
  Shape plane;  // the output's (H, W)
  Tensor forward(const Tensor& cols) const {
    return kernels::col2im(cols, geo.im2col(), plane[0], plane[1]);
  }
  // cols [N, C kh kw, L] with L the plane's number of blocks.
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& c = spec_of(in, 0, name);
    geo.check(name);
    ADJOINT_CHECK(c.shape.size() == 3 && is_floating(c.dtype) && plane.size() == 2, Shape, name,
                  "expected floating blocks [N, C kh kw, L], got ", describe(c));
    const auto [bh, bw] = block_counts(geo, plane[0], plane[1], name);
    const int64_t k = geo.kernel[0] * geo.kernel[1];
    ADJOINT_CHECK(c.shape[1] % k == 0 && c.shape[2] == bh * bw, Shape, name, "blocks ", describe(c),
                  " do not fold into ", plane);
    return {Shape{c.shape[0], c.shape[1] / k, plane[0], plane[1]}, c.dtype};
  }
  // d/dcols: the cotangent's blocks (unfold)
  Tensor vjp(const Ctx&, const Tensor& ct) const { return unfold_op(ct, geo); }
  Tensor jvp(const Ctx&, const Tensor& tc) const { return fold_op(tc, geo, plane); }
  Tensor vmap(const BatchArgs& b) const {
    const Tensor& c = b[0];  // [B, N, C kh kw, L]
    const Tensor y = apply(*this, c.reshape({c.size(0) * c.size(1), c.size(2), c.size(3)}));
    return y.reshape({c.size(0), c.size(1), y.size(1), y.size(2), y.size(3)});
  }
};

Tensor unfold_op(const Tensor& x, const BlockGeometry& g) { return apply(Unfold{g}, x); }
Tensor fold_op(const Tensor& cols, const BlockGeometry& g, const Shape& plane) {
  return apply(Fold{g, plane}, cols);
}

std::vector<int64_t> pair_of(const std::vector<int64_t>& v, const char* what, int64_t min,
                             const char* op) {
  ADJOINT_CHECK(v.size() == 1 || v.size() == 2, Value, op, what, " must be one int or 2 ints, got ",
                v.size(), " values");
  std::vector<int64_t> out = v.size() == 1 ? std::vector<int64_t>{v[0], v[0]} : v;
  for (int64_t x : out)
    ADJOINT_CHECK(x >= min, Value, op, what, " must be ", min == 0 ? "non-negative" : "positive",
                  ", got ", Shape(out));
  return out;
}

BlockGeometry block_geometry(const std::vector<int64_t>& kernel,
                             const std::vector<int64_t>& dilation,
                             const std::vector<int64_t>& padding,
                             const std::vector<int64_t>& stride, const char* op) {
  return {pair_of(kernel, "kernel_size", 1, op), pair_of(dilation, "dilation", 1, op),
          pair_of(padding, "padding", 0, op), pair_of(stride, "stride", 1, op)};
}

// The number of blocks along each dim of a plane, each checked to be at least one.
std::pair<int64_t, int64_t> block_counts(const BlockGeometry& g, int64_t h, int64_t w,
                                         const char* op) {
  const kernels::Im2ColGeometry k = g.im2col();
  const int64_t span_h = h + 2 * k.ph - k.dh * (k.kh - 1) - 1;
  const int64_t span_w = w + 2 * k.pw - k.dw * (k.kw - 1) - 1;
  const int64_t bh = span_h < 0 ? 0 : k.out_h(h), bw = span_w < 0 ? 0 : k.out_w(w);
  ADJOINT_CHECK(bh >= 1 && bw >= 1, Shape, op, "the spatial size (", h, ", ", w,
                ") with kernel_size ", Shape(g.kernel), ", dilation ", Shape(g.dilation),
                ", padding ", Shape(g.padding), " and stride ", Shape(g.stride), " gives (", bh,
                ", ", bw, ") blocks; each must be at least one");
  return {bh, bw};
}

// ---- pad ----

const char* pad_mode_name(PadMode m) {
  switch (m) {
    case PadMode::Constant:
      return "constant";
    case PadMode::Reflect:
      return "reflect";
    case PadMode::Replicate:
      return "replicate";
    case PadMode::Circular:
      return "circular";
  }
  return "unknown";
}

// Constant padding of dim d by (lo, hi): crops first (negative entries), then filled blocks.
Tensor pad_constant_dim(const Tensor& x, int64_t d, int64_t lo, int64_t hi, double value) {
  Tensor y = x;
  if (lo < 0 || hi < 0) y = y.slice(d, lo < 0 ? -lo : 0, y.size(d) - (hi < 0 ? -hi : 0));
  if (lo <= 0 && hi <= 0) return y;
  std::vector<Tensor> parts;
  Shape block = y.shape();
  if (lo > 0) {
    block[d] = lo;
    parts.push_back(full(block, value, TensorOptions(y.dtype()).device(y.device())));
  }
  parts.push_back(y);
  if (hi > 0) {
    block[d] = hi;
    parts.push_back(full(block, value, TensorOptions(y.dtype()).device(y.device())));
  }
  return cat(parts, d);
}

// The source row of each output row of dim d (size n) padded by (lo, hi) in `mode`.
Tensor pad_index(int64_t n, int64_t lo, int64_t hi, PadMode mode) {
  std::vector<int64_t> idx;
  for (int64_t o = 0; o < n + lo + hi; ++o) {
    int64_t i = o - lo;
    if (mode == PadMode::Reflect) {
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
    } else if (mode == PadMode::Replicate) {
      i = std::clamp<int64_t>(i, 0, n - 1);
    } else {
      i = ((i % n) + n) % n;
    }
    idx.push_back(i);
  }
  return tensor(idx);
}

// ---- interpolate ----

// The source rows and weights of linear interpolation along one dim (PyTorch's
// area_pixel_compute_source_index with guard_index_and_lambda).
struct LinearTaps {
  std::vector<int64_t> i0, i1;
  std::vector<double> w0, w1;
};
LinearTaps linear_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  double s;
  if (align_corners)
    s = out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0;
  else
    s = scale && *scale > 0 ? 1 / *scale : static_cast<double>(in) / static_cast<double>(out);
  LinearTaps t;
  for (int64_t o = 0; o < out; ++o) {
    const double real = align_corners ? s * static_cast<double>(o)
                                      : std::max(s * (static_cast<double>(o) + 0.5) - 0.5, 0.0);
    const int64_t i = std::min(static_cast<int64_t>(std::floor(real)), in - 1);
    const double l = std::min(std::max(real - static_cast<double>(i), 0.0), 1.0);
    t.i0.push_back(i);
    t.i1.push_back(i + (i < in - 1 ? 1 : 0));
    t.w0.push_back(1 - l);
    t.w1.push_back(l);
  }
  return t;
}

// The source row of each output row of nearest interpolation (PyTorch's nearest_idx, whose
// scale is a float).
Tensor nearest_index(int64_t in, int64_t out, std::optional<double> scale) {
  std::vector<int64_t> idx;
  const float s = scale && *scale > 0 ? static_cast<float>(1.0 / *scale)
                                      : static_cast<float>(in) / static_cast<float>(out);
  for (int64_t o = 0; o < out; ++o) {
    if (out == in)
      idx.push_back(o);
    else if (out == 2 * in)
      idx.push_back(o >> 1);
    else
      idx.push_back(std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * s)), in - 1));
  }
  return tensor(idx);
}

// Weights along dim d of a tensor of rank r: shaped [out, 1, .., 1] to broadcast there.
Tensor weights_along(const std::vector<double>& w, int64_t d, int64_t r, DType dtype) {
  Shape s(static_cast<std::size_t>(r - d), 1);
  s[0] = static_cast<int64_t>(w.size());
  return tensor(w, s, dtype);
}

}  // namespace

Tensor unfold(const Tensor& x_in, std::vector<int64_t> kernel_size, std::vector<int64_t> dilation,
              std::vector<int64_t> padding, std::vector<int64_t> stride) {
  const char* op = "unfold";
  ADJOINT_CHECK(x_in.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(x_in.dim() == 3 || x_in.dim() == 4, Shape, op,
                "expected a 3-d (unbatched) or 4-d (batched) input, got ", describe(x_in));
  for (int64_t d = x_in.dim() - 3; d < x_in.dim(); ++d)
    ADJOINT_CHECK(x_in.shape()[d] > 0, Shape, op,
                  "expected non-empty channel and spatial dims, got ", describe(x_in));
  const BlockGeometry g = block_geometry(kernel_size, dilation, padding, stride, op);
  block_counts(g, x_in.size(-2), x_in.size(-1), op);
  const Tensor x = to_floating(x_in);
  if (x.dim() == 3) return unfold_op(x.unsqueeze(0), g).squeeze(0);
  return unfold_op(x, g);
}

Tensor fold(const Tensor& x_in, std::vector<int64_t> output_size, std::vector<int64_t> kernel_size,
            std::vector<int64_t> dilation, std::vector<int64_t> padding,
            std::vector<int64_t> stride) {
  const char* op = "fold";
  ADJOINT_CHECK(x_in.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(x_in.dim() == 2 || x_in.dim() == 3, Shape, op,
                "expected a 2-d (unbatched) or 3-d (batched) input, got ", describe(x_in));
  const BlockGeometry g = block_geometry(kernel_size, dilation, padding, stride, op);
  const std::vector<int64_t> out = pair_of(output_size, "output_size", 1, op);
  const int64_t k = g.kernel[0] * g.kernel[1];
  const int64_t rows = x_in.size(-2), cols = x_in.size(-1);
  ADJOINT_CHECK(rows > 0 && rows % k == 0, Shape, op, "expected the input's dim ", x_in.dim() - 2,
                " to be a positive multiple of the kernel's ", k, " elements, got ",
                describe(x_in));
  const auto [bh, bw] = block_counts(g, out[0], out[1], op);
  ADJOINT_CHECK(cols == bh * bw, Shape, op, "expected the input's last dim to be the number of ",
                "blocks ", bh, " * ", bw, " = ", bh * bw, " for output_size ", Shape(out), ", got ",
                describe(x_in));
  const Tensor x = to_floating(x_in);
  const Shape plane{out[0], out[1]};
  if (x.dim() == 2) return fold_op(x.unsqueeze(0), g, plane).squeeze(0);
  return fold_op(x, g, plane);
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, PadMode mode, double value) {
  const char* op = "pad";
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(pad.size() % 2 == 0, Value, op, "the pad list must have an even length, got ",
                pad.size(), " values");
  const auto dims = static_cast<int64_t>(pad.size() / 2);
  ADJOINT_CHECK(dims <= x.dim(), Shape, op, "pad list of ", pad.size(),
                " values pads more dims than input ", describe(x), " has");
  if (mode != PadMode::Constant) {
    ADJOINT_CHECK(dims >= 1 && dims <= 3 && (x.dim() == dims + 1 || x.dim() == dims + 2), Shape, op,
                  pad_mode_name(mode), " padding of ", dims, " dims takes a ", dims + 1, "-d or ",
                  dims + 2, "-d input, got ", describe(x));
    ADJOINT_CHECK(value == 0, Value, op, "a fill value is only for constant padding, got ", value,
                  " with mode ", pad_mode_name(mode));
  }
  Tensor y = mode == PadMode::Constant ? x : to_floating(x);
  for (int64_t k = 0; k < dims; ++k) {
    const int64_t d = x.dim() - 1 - k, lo = pad[2 * k], hi = pad[2 * k + 1];
    const int64_t n = x.size(d);
    ADJOINT_CHECK(n + lo + hi >= 0, Shape, op, "padding (", lo, ", ", hi, ") of dim ", d,
                  " of input ", describe(x), " gives a negative size ", n + lo + hi);
    if (mode == PadMode::Constant) {
      y = pad_constant_dim(y, d, lo, hi, value);
      continue;
    }
    if (mode == PadMode::Reflect)
      ADJOINT_CHECK(lo < n && hi < n, Value, op, "reflect padding (", lo, ", ", hi, ") of dim ", d,
                    " must be smaller than its size ", n, " (input ", describe(x), ")");
    else if (mode == PadMode::Circular)
      ADJOINT_CHECK(lo <= n && hi <= n, Value, op, "circular padding (", lo, ", ", hi, ") of dim ",
                    d, " must be at most its size ", n, " (input ", describe(x), ")");
    else
      ADJOINT_CHECK(n > 0, Shape, op, "replicate padding of the empty dim ", d, " of input ",
                    describe(x));
    if (lo == 0 && hi == 0) continue;
    y = index_select(y, d, on_device_of(pad_index(n, lo, hi, mode), y));
  }
  return y;
}

Tensor interpolate(const Tensor& x_in, const InterpolateOptions& o) {
  const char* op = "interpolate";
  ADJOINT_CHECK(x_in.defined(), Value, op, "got an undefined input");
  const bool linear = o.mode != InterpolateMode::Nearest;
  const int64_t spatial = x_in.dim() - 2;
  if (o.mode == InterpolateMode::Nearest)
    ADJOINT_CHECK(spatial == 1 || spatial == 2, Shape, op,
                  "nearest mode takes a 3-d or 4-d input [N, C, *spatial], got ", describe(x_in));
  else
    ADJOINT_CHECK(spatial == (o.mode == InterpolateMode::Linear ? 1 : 2), Shape, op,
                  o.mode == InterpolateMode::Linear ? "linear" : "bilinear", " mode takes a ",
                  o.mode == InterpolateMode::Linear ? 3 : 4, "-d input [N, C, *spatial], got ",
                  describe(x_in));
  ADJOINT_CHECK(linear || !o.align_corners, Value, op,
                "align_corners is only for the linear modes (linear, bilinear)");
  ADJOINT_CHECK(o.size.empty() != o.scale_factor.empty(), Value, op,
                o.size.empty() ? "either size or scale_factor must be given"
                               : "only one of size and scale_factor may be given");
  const auto n = static_cast<std::size_t>(spatial);
  const std::vector<int64_t>& size = o.size;
  const std::vector<double>& scale = o.scale_factor;
  ADJOINT_CHECK(size.empty() || size.size() == 1 || size.size() == n, Value, op,
                "size must have one value or ", n, ", got ", size.size());
  ADJOINT_CHECK(scale.empty() || scale.size() == 1 || scale.size() == n, Value, op,
                "scale_factor must have one value or ", n, ", got ", scale.size());
  Tensor y = to_floating(x_in);
  // W first, then H (see the file comment).
  for (int64_t k = spatial - 1; k >= 0; --k) {
    const int64_t d = 2 + k, in = x_in.size(d);
    std::optional<double> s;
    int64_t out;
    if (!size.empty()) {
      out = size.size() == 1 ? size[0] : size[k];
    } else {
      const double f = scale.size() == 1 ? scale[0] : scale[k];
      ADJOINT_CHECK(f > 0 && std::isfinite(f), Value, op, "scale_factor must be positive, got ", f);
      out = static_cast<int64_t>(std::floor(static_cast<double>(in) * f));
      if (!o.recompute_scale_factor) s = f;
    }
    ADJOINT_CHECK(out > 0 && in > 0, Shape, op, "input ", describe(x_in), " and output size ", out,
                  " along dim ", d, " must both be non-empty");
    if (!linear) {
      y = index_select(y, d, on_device_of(nearest_index(in, out, s), y));
      continue;
    }
    const LinearTaps t = linear_taps(in, out, o.align_corners.value_or(false), s);
    const int64_t r = y.dim();
    y = index_select(y, d, on_device_of(tensor(t.i0), y)) *
            on_device_of(weights_along(t.w0, d, r, y.dtype()), y) +
        index_select(y, d, on_device_of(tensor(t.i1), y)) *
            on_device_of(weights_along(t.w1, d, r, y.dtype()), y);
  }
  return y;
}

Tensor pixel_shuffle(const Tensor& x, int64_t r) {
  const char* op = "pixel_shuffle";
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(x.dim() >= 3, Shape, op, "expected an input of at least 3 dims, got ", describe(x));
  ADJOINT_CHECK(r > 0, Value, op, "upscale_factor must be positive, got ", r);
  const int64_t c = x.size(-3), h = x.size(-2), w = x.size(-1);
  ADJOINT_CHECK(c % (r * r) == 0, Shape, op, "the channel dim of ", describe(x),
                " must be divisible by upscale_factor squared (", r * r, ")");
  const int64_t lead = x.dim() - 3;
  Shape s(std::vector<int64_t>(x.shape().begin(), x.shape().begin() + lead));
  Shape split = s, merged = s;
  for (int64_t v : {c / (r * r), r, r, h, w}) split.push_back(v);
  for (int64_t v : {c / (r * r), h * r, w * r}) merged.push_back(v);
  // [*, C, r, r, H, W] -> [*, C, H, r, W, r]
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < lead; ++i) perm.push_back(i);
  for (int64_t i : {0, 3, 1, 4, 2}) perm.push_back(lead + i);
  return x.reshape(split).permute(perm).reshape(merged);
}

Tensor pixel_unshuffle(const Tensor& x, int64_t r) {
  const char* op = "pixel_unshuffle";
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined input");
  ADJOINT_CHECK(x.dim() >= 3, Shape, op, "expected an input of at least 3 dims, got ", describe(x));
  ADJOINT_CHECK(r > 0, Value, op, "downscale_factor must be positive, got ", r);
  const int64_t c = x.size(-3), h = x.size(-2), w = x.size(-1);
  ADJOINT_CHECK(h % r == 0 && w % r == 0, Shape, op, "the spatial dims of ", describe(x),
                " must be divisible by downscale_factor ", r);
  const int64_t lead = x.dim() - 3;
  Shape s(std::vector<int64_t>(x.shape().begin(), x.shape().begin() + lead));
  Shape split = s, merged = s;
  for (int64_t v : {c, h / r, r, w / r, r}) split.push_back(v);
  for (int64_t v : {c * r * r, h / r, w / r}) merged.push_back(v);
  // [*, C, H, r, W, r] -> [*, C, r, r, H, W]
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < lead; ++i) perm.push_back(i);
  for (int64_t i : {0, 2, 4, 1, 3}) perm.push_back(lead + i);
  return x.reshape(split).permute(perm).reshape(merged);
}

}  // namespace adjoint

ADJOINT_OPS_FILE(resample)
