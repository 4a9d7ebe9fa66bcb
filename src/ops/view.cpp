// View ops that only change shape and strides: view, reshape, permute, transpose, squeeze,
// unsqueeze. Outputs share storage with the input; slicing and joining live in shape.cpp.
#include <optional>

#include "adjoint/error.h"
#include "core/op_fields.h"
#include "ops/common.h"

namespace adjoint {
namespace {

Shape infer_shape(const Shape& requested, int64_t numel, const Tensor& x, const char* op) {
  Shape s = requested;
  int64_t known = 1, infer_at = -1;
  bool overflow = false, zero = false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      ADJOINT_CHECK(infer_at < 0, Shape, op, "only one dimension can be -1, got ", requested);
      infer_at = static_cast<int64_t>(i);
    } else {
      ADJOINT_CHECK(s[i] >= 0, Shape, op, "invalid size ", s[i], " in ", requested);
      overflow |= __builtin_mul_overflow(known, s[i], &known);
      zero |= s[i] == 0;
    }
  }
  ADJOINT_CHECK(!overflow || zero, Shape, op, "shape ", requested,
                " is too large: more than 2^63 - 1 elements");
  if (infer_at >= 0) {
    ADJOINT_CHECK(known != 0 && numel % known == 0, Shape, op, "shape ", requested,
                  " is invalid for input ", describe(x));
    s[infer_at] = numel / known;
  }
  ADJOINT_CHECK(s.numel() == numel, Shape, op, "shape ", requested, " is invalid for input ",
                describe(x), " of ", numel, " elements");
  return s;
}

// Strides that view `x` (of shape `from`, strides `strides`) as `to`, or nullopt when no view
// can (PyTorch's computeStride): `to` must split or merge only runs of dims that are laid out
// as one contiguous chunk of x.
std::optional<Shape> view_strides(const Shape& from, const Shape& strides, const Shape& to) {
  Shape out(to.size(), 1);
  if (from.numel() == 0 || from.empty()) return from.numel() == 0 ? contiguous_strides(to) : out;
  int64_t view_d = static_cast<int64_t>(to.size()) - 1;
  int64_t chunk_base = strides.back(), from_numel = 1, to_numel = 1;
  for (int64_t d = static_cast<int64_t>(from.size()) - 1; d >= 0; --d) {
    from_numel *= from[d];
    // A chunk ends where the next dim out is not laid out right after this one.
    if (d == 0 || (from[d - 1] != 1 && strides[d - 1] != from_numel * chunk_base)) {
      while (view_d >= 0 && (to_numel < from_numel || to[view_d] == 1)) {
        out[view_d] = to_numel * chunk_base;
        to_numel *= to[view_d];
        --view_d;
      }
      if (to_numel != from_numel) return std::nullopt;
      if (d > 0) {
        chunk_base = strides[d - 1];
        from_numel = to_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

/// A view's (or restride's) shape checked against the input `x` it views: sizes of 0 or more
/// and x's element count (imported ops; view() and reshape() make such shapes).
void check_view_shape(const Shape& shape, const detail::ValueSpec& x, const char* op) {
  for (int64_t d : shape) ADJOINT_CHECK(d >= 0, Shape, op, "invalid size ", d, " in ", shape);
  ADJOINT_CHECK(shape.numel() == x.shape.numel(), Shape, op, "shape ", shape,
                " is invalid for input ", describe(x), " of ", x.shape.numel(), " elements");
}

struct View {
  static constexpr const char* name = "view";
  auto fields() { return std::tie(shape); }
  static constexpr Save save = Save::None;
  Shape shape;
  // Eager code views only contiguous tensors (view() checks). A compiled graph's replay may
  // hand the traced view another layout than it was traced with (an expanded cotangent, a
  // transposed argument of the same shape): its strides then come from x's own, or, where no
  // view of x has this shape, the view is of a contiguous copy (as reshape() would make).
  Tensor forward(const Tensor& x) const {
    if (x.is_contiguous())
      return make_view(x, shape, contiguous_strides(shape), x.storage_offset());
    if (const std::optional<Shape> strides = view_strides(x.shape(), x.strides(), shape))
      return make_view(x, shape, *strides, x.storage_offset());
    const Tensor c = kernels::cast(x, x.dtype());
    return make_view(c, shape, contiguous_strides(shape), c.storage_offset());
  }
  // view() gives it a shape of the input's element count, with no -1 left.
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& x = spec_of(in, 0, name);
    check_view_shape(shape, x, name);
    return {shape, x.dtype};
  }
  Tensor vjp(const Ctx& c, const Tensor& gy) const { return gy.reshape(c.input_shape(0)); }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return tx.reshape(shape); }
  Tensor vmap(const BatchArgs& b) const {
    return reshape(b[0], detail::with_batch_size(shape, b.size()));
  }
};

/// `dims` as a permutation of the dims of a tensor (`x` describes it), wrapped, or an error:
/// permute()'s checks, which an imported Permute passes too.
std::vector<int64_t> checked_permutation(const std::vector<int64_t>& dims, int64_t nd,
                                         const std::string& x) {
  ADJOINT_CHECK(static_cast<int64_t>(dims.size()) == nd, Shape, "permute", "got ", dims.size(),
                " dims for a tensor with ", nd, " dims (", x, ")");
  std::vector<int64_t> d;
  std::vector<bool> seen(static_cast<std::size_t>(nd), false);
  for (int64_t i : dims) {
    int64_t w = wrap_dim(i, nd, "permute");
    ADJOINT_CHECK(!seen[static_cast<std::size_t>(w)], Value, "permute", "dim ", i,
                  " repeats in the permutation");
    seen[static_cast<std::size_t>(w)] = true;
    d.push_back(w);
  }
  return d;
}

struct Permute {
  static constexpr const char* name = "permute";
  auto fields() { return std::tie(dims); }
  static constexpr Save save = Save::None;
  std::vector<int64_t> dims;
  Tensor forward(const Tensor& x) const {
    Shape shape(dims.size()), strides(dims.size());
    for (std::size_t i = 0; i < dims.size(); ++i) {
      shape[i] = x.shape()[dims[i]];
      strides[i] = x.strides()[dims[i]];
    }
    return make_view(x, shape, strides, x.storage_offset());
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& x = spec_of(in, 0, name);
    const auto nd = static_cast<int64_t>(x.shape.size());
    ADJOINT_CHECK(checked_permutation(dims, nd, describe(x)) == dims, Value, name, "dims ",
                  Shape(dims), " are not normalized");
    Shape shape(dims.size());
    for (std::size_t i = 0; i < dims.size(); ++i) shape[i] = x.shape[dims[i]];
    return {shape, x.dtype};
  }
  std::vector<int64_t> inverse() const {
    std::vector<int64_t> inv(dims.size());
    for (std::size_t i = 0; i < dims.size(); ++i) inv[dims[i]] = static_cast<int64_t>(i);
    return inv;
  }
  Tensor vjp(const Ctx&, const Tensor& gy) const { return gy.permute(inverse()); }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return tx.permute(dims); }
  Tensor vmap(const BatchArgs& b) const {
    std::vector<int64_t> d{0};
    for (int64_t i : dims) d.push_back(i + 1);
    return apply(Permute{d}, b[0]);
  }
};

// squeeze/unsqueeze: insert or drop size-1 dims, keeping the other strides.
struct Restride {
  static constexpr const char* name = "view";
  static constexpr const char* export_name = "restride";
  auto fields() { return std::tie(shape, strides); }
  static constexpr Save save = Save::None;
  Shape shape, strides;
  // squeeze and unsqueeze add or drop size-1 dims only: the other dims take x's strides, in
  // order, so that a compiled graph's replay on another layout than the traced one views x
  // right; the size-1 dims keep the recorded strides (never used to address an element).
  Tensor forward(const Tensor& x) const {
    ADJOINT_CHECK(strides.size() == shape.size() && shape.numel() == x.numel(), Shape, "view",
                  "cannot restride ", describe(x), " to shape ", shape, " with strides ", strides);
    Shape s = strides;
    std::size_t from = 0;
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 1) continue;
      while (from < static_cast<std::size_t>(x.dim()) && x.shape()[from] == 1) ++from;
      ADJOINT_CHECK(from < static_cast<std::size_t>(x.dim()) && x.shape()[from] == shape[i], Shape,
                    "view", "cannot restride ", describe(x), " to shape ", shape);
      s[i] = x.strides()[from++];
    }
    return make_view(x, shape, s, x.storage_offset());
  }
  // squeeze() and unsqueeze() drop or add size-1 dims: the other sizes are x's, in order.
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& x = spec_of(in, 0, name);
    check_view_shape(shape, x, name);
    ADJOINT_CHECK(strides.size() == shape.size(), Shape, name, "cannot restride ", describe(x),
                  " to shape ", shape, " with strides ", strides);
    Shape kept, from;
    for (int64_t d : shape)
      if (d != 1) kept.push_back(d);
    for (int64_t d : x.shape)
      if (d != 1) from.push_back(d);
    ADJOINT_CHECK(kept == from, Shape, name, "cannot restride ", describe(x), " to shape ", shape);
    return {shape, x.dtype};
  }
  Tensor vjp(const Ctx& c, const Tensor& gy) const { return gy.reshape(c.input_shape(0)); }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return tx.reshape(shape); }
  // Batching: squeeze and unsqueeze keep the order of elements, so a reshape of the batch.
  Tensor vmap(const BatchArgs& b) const {
    return reshape(b[0], detail::with_batch_size(shape, b.size()));
  }
};

}  // namespace

Tensor view(const Tensor& x, const Shape& shape) {
  Shape s = infer_shape(shape, x.numel(), x, "view");
  ADJOINT_CHECK(x.is_contiguous(), Shape, "view", "view needs a contiguous tensor, got ",
                describe(x), " with strides ", x.strides(), "; use reshape()");
  if (s == x.shape()) return x;
  return apply(View{s}, x);
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  Shape s = infer_shape(shape, x.numel(), x, "reshape");
  if (s == x.shape()) return x;
  return view(x.is_contiguous() ? x : x.contiguous(), s);
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  const int64_t nd = x.dim();
  const std::vector<int64_t> d = checked_permutation(dims, nd, describe(x));
  bool identity = true;
  for (int64_t i = 0; i < nd; ++i) identity &= d[i] == i;
  if (identity) return x;
  return apply(Permute{d}, x);
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  const int64_t nd = x.dim();
  int64_t a = wrap_dim(dim0, nd, "transpose"), b = wrap_dim(dim1, nd, "transpose");
  if (nd == 0 || a == b) return x;
  std::vector<int64_t> dims(nd);
  for (int64_t i = 0; i < nd; ++i) dims[i] = i;
  std::swap(dims[a], dims[b]);
  return apply(Permute{dims}, x);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape shape = x.shape(), strides = x.strides();
  int64_t stride = d < x.dim() ? x.strides()[d] * x.shape()[d] : 1;
  shape.insert(d, 1);
  strides.insert(d, stride);
  return apply(Restride{shape, strides}, x);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  if (x.dim() == 0) return x;
  int64_t d = wrap_dim(dim, x.dim(), "squeeze");
  if (x.shape()[d] != 1) return x;
  Shape shape = x.shape(), strides = x.strides();
  shape.erase(d);
  strides.erase(d);
  return apply(Restride{shape, strides}, x);
}

Tensor squeeze(const Tensor& x) {
  Shape shape, strides;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (x.shape()[i] == 1) continue;
    shape.push_back(x.shape()[i]);
    strides.push_back(x.strides()[i]);
  }
  if (shape.size() == static_cast<std::size_t>(x.dim())) return x;
  return apply(Restride{shape, strides}, x);
}

Tensor Tensor::view(const Shape& shape) const { return adjoint::view(*this, shape); }
Tensor Tensor::reshape(const Shape& shape) const { return adjoint::reshape(*this, shape); }
Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  return adjoint::permute(*this, dims);
}
Tensor Tensor::transpose(int64_t a, int64_t b) const { return adjoint::transpose(*this, a, b); }
Tensor Tensor::t() const { return dim() < 2 ? *this : adjoint::transpose(*this, 0, 1); }
Tensor Tensor::unsqueeze(int64_t dim) const { return adjoint::unsqueeze(*this, dim); }
Tensor Tensor::squeeze(int64_t dim) const { return adjoint::squeeze(*this, dim); }
Tensor Tensor::squeeze() const { return adjoint::squeeze(*this); }

}  // namespace adjoint

ADJOINT_OPS_FILE(view)
