// Indexing ops: index_select, gather and their transposes index_add and scatter_add (each
// pair is the other's VJP), and the composites embedding, masked_fill, one_hot, tril, triu.
// Indices are int64 tensors, saved for backward through the Saver so in-place changes to them
// are caught; they never receive a gradient.
#include <algorithm>
#include <vector>

#include "adjoint/error.h"
#include "backend/host_transfer.h"
#include "core/op_fields.h"
#include "core/op_scope.h"
#include "core/op_tracer.h"
#include "ops/common.h"

namespace adjoint {
namespace {

void check_index_dtype(const Tensor& index, const char* op) {
  ADJOINT_CHECK(index.defined(), Value, op, "index is undefined");
  ADJOINT_CHECK(index.dtype() == DType::Int64, DType, op, "indices must be int64, got ",
                describe(index));
}

// A batched 1-d index [B, K] as a gather/scatter index of `shape` (whose dim `dim` has K
// entries): idx[b, k] at every position with that b and k.
Tensor index_along(const Tensor& idx, const Shape& shape, int64_t dim) {
  Shape view(shape.size(), 1);
  view[0] = idx.size(0);
  view[dim] = idx.size(1);
  Shape full = shape;
  full[dim] = idx.size(1);
  return idx.reshape(view).expand(full);
}

// Whether some input is logically 0-d: such an op indexes dim 0 of a scalar, which the
// physical batch dim would shift out of range, so its rule loops over the examples.
bool has_scalar(const BatchArgs& b) {
  for (std::size_t i = 0; i < b.count(); ++i)
    if (b[i].defined() && b.logical_dim(i) == 0) return true;
  return false;
}

struct IndexSelect {
  static constexpr const char* name = "index_select";
  auto fields() { return std::tie(dim, op); }
  static constexpr Save save = Save::None;
  int64_t dim;
  const char* op;  // reported in index errors ("embedding" when called from there)
  Tensor forward(Saver& s, const Tensor& x, const Tensor& index) const {
    s.save(index);
    return kernels::index_select(x, dim, index, op);
  }
  // y = x[index] along dim, so dx = index_add(0, dim, index, gy).
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    return {index_add(zeros(c.input_shape(0), TensorOptions(gy.dtype()).device(gy.device())), dim,
                      c.saved(0), gy),
            Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor&) const {
    return index_select(tx, dim, c.saved(0));
  }
  // Batching: a batched index picks different rows per example, which is a gather.
  Tensor vmap(const BatchArgs& b, Saver& s) const {
    s.save(b.logical(1));
    if (has_scalar(b))
      return detail::each_example(b, [&](const auto& xs) { return apply(*this, xs[0], xs[1]); });
    if (!b.batched(1)) return apply(IndexSelect{dim + 1, op}, b[0], b[1]);
    Tensor x = b.with_batch(0);
    return gather(x, dim + 1, index_along(b[1], x.shape(), dim + 1));
  }
};

struct Gather {
  static constexpr const char* name = "gather";
  auto fields() { return std::tie(dim); }
  static constexpr Save save = Save::None;
  int64_t dim;
  Tensor forward(Saver& s, const Tensor& x, const Tensor& index) const {
    s.save(index);
    return kernels::gather(x, dim, index, name);
  }
  // y[p] = x[p with p[dim] = index[p]], so dx = scatter_add(0, dim, index, gy).
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gy) const {
    return {scatter_add(zeros(c.input_shape(0), TensorOptions(gy.dtype()).device(gy.device())), dim,
                        c.saved(0), gy),
            Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor&) const {
    return gather(tx, dim, c.saved(0));
  }
  Tensor vmap(const BatchArgs& b, Saver& s) const {
    s.save(b.logical(1));
    if (has_scalar(b))
      return detail::each_example(b, [&](const auto& xs) { return apply(*this, xs[0], xs[1]); });
    return apply(Gather{dim + 1}, b.with_batch(0), b.with_batch(1));
  }
};

struct ScatterAdd {
  static constexpr const char* name = "scatter_add";
  auto fields() { return std::tie(dim); }
  static constexpr Save save = Save::None;
  int64_t dim;
  Tensor forward(Saver& s, const Tensor& x, const Tensor& index, const Tensor& src) const {
    s.save(index);
    return kernels::scatter_add(x, dim, index, src, name);
  }
  // y = x + scatter(src): dx = gy, dsrc = gather(gy, dim, index).
  std::array<Tensor, 3> vjp(const Ctx& c, const Tensor& gy) const {
    return {gy, Tensor(), c.needs_grad(2) ? gather(gy, dim, c.saved(0)) : Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor&, const Tensor& ts) const {
    return scatter_add(tx, dim, c.saved(0), ts);
  }
  Tensor vmap(const BatchArgs& b, Saver& s) const {
    s.save(b.logical(1));
    if (has_scalar(b))
      return detail::each_example(
          b, [&](const auto& xs) { return apply(*this, xs[0], xs[1], xs[2]); });
    return apply(ScatterAdd{dim + 1}, b.with_batch(0), b.with_batch(1), b.with_batch(2));
  }
};

struct IndexAdd {
  static constexpr const char* name = "index_add";
  auto fields() { return std::tie(dim); }
  static constexpr Save save = Save::None;
  int64_t dim;
  Tensor forward(Saver& s, const Tensor& x, const Tensor& index, const Tensor& source) const {
    s.save(index);
    return kernels::index_add(x, dim, index, source, name);
  }
  // y = x + index_add(0, source): dx = gy, dsource = index_select(gy, dim, index).
  std::array<Tensor, 3> vjp(const Ctx& c, const Tensor& gy) const {
    return {gy, Tensor(), c.needs_grad(2) ? index_select(gy, dim, c.saved(0)) : Tensor()};
  }
  Tensor jvp(const Ctx& c, const Tensor& tx, const Tensor&, const Tensor& ts) const {
    return index_add(tx, dim, c.saved(0), ts);
  }
  // Batching: a batched index adds into different rows per example, which is a scatter_add.
  Tensor vmap(const BatchArgs& b, Saver& s) const {
    s.save(b.logical(1));
    if (has_scalar(b))
      return detail::each_example(
          b, [&](const auto& xs) { return apply(*this, xs[0], xs[1], xs[2]); });
    if (!b.batched(1)) return apply(IndexAdd{dim + 1}, b.with_batch(0), b[1], b.with_batch(2));
    Tensor src = b.with_batch(2);
    return scatter_add(b.with_batch(0), dim + 1, index_along(b[1], src.shape(), dim + 1), src);
  }
};

Tensor index_select_as(const Tensor& x, int64_t dim, const Tensor& index, const char* op) {
  ADJOINT_CHECK(x.defined(), Value, op, "input is undefined");
  check_index_dtype(index, op);
  const int64_t d = wrap_dim(dim, x.dim(), op);
  return apply(IndexSelect{d, op}, x, index);
}

// Both operands cast to their common dtype (scatter_add and index_add add them).
std::pair<Tensor, Tensor> promote_pair(const Tensor& x, const Tensor& y, const char* what,
                                       const char* op) {
  ADJOINT_CHECK(x.defined() && y.defined(), Value, op, "input or ", what, " is undefined");
  const DType dt = promote_types(x.dtype(), y.dtype());
  return {cast_to(x, dt), cast_to(y, dt)};
}

// tril/triu keep element (i, j) of the last two dims where j - i <= diagonal (tril) or
// j - i >= diagonal (triu); the mask is built once and broadcast over the batch dims.
Tensor triangle(const Tensor& x, int64_t diagonal, bool lower, const char* op) {
  ADJOINT_CHECK(x.defined(), Value, op, "input is undefined");
  ADJOINT_CHECK(x.dim() >= 2, Shape, op, "expected a tensor with at least 2 dims, got ",
                describe(x));
  const int64_t rows = x.shape()[x.dim() - 2], cols = x.shape()[x.dim() - 1];
  Tensor mask = make_empty({rows, cols}, DType::Bool);
  std::vector<uint8_t> m(static_cast<std::size_t>(mask.numel()));
  // One pass over the mask's elements, not rows x cols nested loops: a [2^40, 0] input has
  // no elements but 2^40 rows, and the outer loop alone would spin for hours.
  for (int64_t k = 0, n = mask.numel(); k < n; ++k) {
    const int64_t i = k / cols, j = k % cols;
    m[k] = lower ? j - i <= diagonal : j - i >= diagonal;
  }
  detail::write_host_values<uint8_t>(mask, m, op);
  detail::note_constant(mask);
  // A constant of C++ values: made on CPU, then given to x's device (on meta, its shape).
  if (!x.device().is_cpu()) mask = mask.to(x.device());
  // d tril(x) = mask * dx (Where's rule)
  return where(mask, x, zeros({}, x.dtype()));
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  return index_select_as(x, dim, index, "index_select");
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  ADJOINT_CHECK(x.defined(), Value, "gather", "input is undefined");
  check_index_dtype(index, "gather");
  return apply(Gather{wrap_dim(dim, x.dim(), "gather")}, x, index);
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_index_dtype(index, "scatter_add");
  auto [a, s] = promote_pair(x, src, "src", "scatter_add");
  const int64_t d = wrap_dim(dim, a.dim(), "scatter_add");
  // Elements of src beyond the index's extent are not used; narrowing src first gives them
  // a zero gradient through the slice rule.
  ADJOINT_CHECK(s.dim() == index.dim(), Shape, "scatter_add", "index ", describe(index),
                " and src ", describe(s), " must have the same number of dims");
  for (int64_t k = 0; k < s.dim(); ++k) {
    ADJOINT_CHECK(index.shape()[k] <= s.shape()[k], Shape, "scatter_add", "index ", describe(index),
                  " is larger than src ", describe(s), " in dim ", k);
    if (index.shape()[k] < s.shape()[k]) s = narrow(s, k, 0, index.shape()[k]);
  }
  return apply(ScatterAdd{d}, a, index, s);
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source) {
  check_index_dtype(index, "index_add");
  auto [a, s] = promote_pair(x, source, "source", "index_add");
  return apply(IndexAdd{wrap_dim(dim, a.dim(), "index_add")}, a, index, s);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  ADJOINT_CHECK(x.defined() && mask.defined(), Value, "masked_fill", "input or mask is undefined");
  ADJOINT_CHECK(mask.dtype() == DType::Bool, DType, "masked_fill", "mask must be bool, got ",
                describe(mask));
  ADJOINT_CHECK(broadcast_shapes(x.shape(), mask.shape(), "masked_fill") == x.shape(), Shape,
                "masked_fill", "mask ", describe(mask), " does not broadcast to input ",
                describe(x));
  // The value in x's dtype: NaN, inf or a value out of range into an int64 tensor is an error
  // naming this op (see core/scalar_convert.h).
  Tensor fill_value = make_empty({}, x.dtype());
  {
    detail::OpScope scope("masked_fill");
    kernels::fill(fill_value, value);
  }
  detail::note_constant(fill_value);
  // d masked_fill(x) = where(mask, 0, dx) (Where's rule)
  return where(mask, fill_value, x);
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  ADJOINT_CHECK(weight.defined(), Value, "embedding", "weight is undefined");
  check_index_dtype(indices, "embedding");
  ADJOINT_CHECK(weight.dim() == 2, Shape, "embedding", "weight must be 2-d [vocabulary, dim], got ",
                describe(weight));
  Shape out_shape = indices.shape();
  out_shape.push_back(weight.shape()[1]);
  // Rows picked by the flattened indices; IndexSelect's VJP index_adds gy back, summing
  // repeated indices.
  Tensor rows = index_select_as(weight, 0, indices.reshape({-1}), "embedding");
  return rows.reshape(out_shape);
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  check_index_dtype(indices, "one_hot");
  const std::vector<int64_t> idx = indices.to_vector<int64_t>();
  if (num_classes == -1) {
    ADJOINT_CHECK(!idx.empty(), Value, "one_hot",
                  "cannot infer the number of classes from an empty tensor; pass num_classes");
    const int64_t top = *std::max_element(idx.begin(), idx.end());
    // top + 1 classes: INT64_MAX has no successor (a signed overflow, found by fuzz_ops).
    ADJOINT_CHECK(top < INT64_MAX, Value, "one_hot", "index ", top,
                  " would need more than 2^63 - 1 classes");
    num_classes = top + 1;
  }
  ADJOINT_CHECK(num_classes >= 0, Value, "one_hot", "num_classes must be -1 or >= 0, got ",
                num_classes);
  for (int64_t v : idx)
    ADJOINT_CHECK(v >= 0 && v < num_classes, Index, "one_hot", "index ", v, " is out of range for ",
                  num_classes, " classes");
  Shape shape = indices.shape();
  shape.push_back(num_classes);
  Tensor out = make_empty(shape, DType::Int64);
  std::vector<int64_t> o(static_cast<std::size_t>(out.numel()), 0);
  for (std::size_t i = 0; i < idx.size(); ++i)
    o[i * static_cast<std::size_t>(num_classes) + static_cast<std::size_t>(idx[i])] = 1;
  detail::write_host_values<int64_t>(out, o, "one_hot");
  return out;
}

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, true, "tril"); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle(x, diagonal, false, "triu"); }

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const {
  return adjoint::index_select(*this, dim, index);
}
Tensor Tensor::gather(int64_t dim, const Tensor& index) const {
  return adjoint::gather(*this, dim, index);
}
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  return adjoint::scatter_add(*this, dim, index, src);
}
Tensor Tensor::masked_fill(const Tensor& mask, Scalar value) const {
  return adjoint::masked_fill(*this, mask, value);
}
Tensor Tensor::tril(int64_t diagonal) const { return adjoint::tril(*this, diagonal); }
Tensor Tensor::triu(int64_t diagonal) const { return adjoint::triu(*this, diagonal); }

}  // namespace adjoint

ADJOINT_OPS_FILE(indexing)
