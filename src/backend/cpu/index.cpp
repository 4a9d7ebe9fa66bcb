// Indexing kernels: index_select and gather (copies picked by an int64 index) and their
// transposes scatter_add and index_add (out of place: a copy of x with values added at the
// index). Every index is bounds-checked before anything is written, and the adds run in one
// sequential order, so results are deterministic. Inputs may have any strides.
#include <cstring>

#include "adjoint/error.h"
#include "backend/cpu/opmath.h"
#include "backend/cpu/wrapping.h"
#include "backend/device_kernels.h"
#include "backend/kernels.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

// Shape and strides (elements) of t, with a 0-d tensor seen as one element of shape [1].
struct Layout {
  Shape shape, strides;
  explicit Layout(const Tensor& t) : shape(t.shape()), strides(t.strides()) {
    if (shape.empty()) {
      shape.push_back(1);
      strides.push_back(1);
    }
  }
  int64_t dims() const { return static_cast<int64_t>(shape.size()); }
};

// Sizes before, at and after `dim`: a contiguous tensor is [outer, n, inner].
struct Split3 {
  int64_t outer = 1, n = 1, inner = 1;
  Split3(const Shape& s, int64_t dim) {
    for (int64_t i = 0; i < dim; ++i) outer *= s[i];
    n = s[dim];
    for (std::size_t i = dim + 1; i < s.size(); ++i) inner *= s[i];
  }
};

Tensor contiguous_copy(const Tensor& t) { return t.is_contiguous() ? t : cast(t, t.dtype()); }

// The index as a contiguous int64 tensor, every element checked against [0, size).
Tensor checked_index(const Tensor& index, int64_t size, int64_t dim, const Tensor& x,
                     const char* op) {
  ADJOINT_CHECK(index.dtype() == DType::Int64, DType, op, "index must be int64, got ",
                describe(index));
  Tensor idx = contiguous_copy(index);
  const int64_t* p = idx.data_ptr<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i)
    ADJOINT_CHECK(p[i] >= 0 && p[i] < size, Index, op, "index ", p[i], " is out of range for dim ",
                  dim, " of size ", size, " (input ", describe(x), ")");
  return idx;
}

int64_t checked_dim(const Layout& x, int64_t dim, const char* op) {
  return wrap_dim(dim, x.dims(), op);
}

// For each element of a contiguous tensor of `shape` in row-major order, calls
// f(flat, position) where position is its multi-index (odometer, no division per element).
template <class F>
void for_each_position(const Shape& shape, F&& f) {
  const int64_t numel = shape.numel();
  Shape pos(shape.size(), 0);
  for (int64_t flat = 0; flat < numel; ++flat) {
    f(flat, pos);
    for (std::size_t d = shape.size(); d-- > 0;) {
      if (++pos[d] < shape[d]) break;
      pos[d] = 0;
    }
  }
}

// gather and scatter_add index a tensor of index's shape: the index may be smaller than the
// other operands in every dim (and than x in dims other than `dim`).
void check_index_fits(const Layout& index, const Layout& other, int64_t dim, bool skip_dim,
                      const Tensor& idx_t, const Tensor& other_t, const char* what,
                      const char* op) {
  ADJOINT_CHECK(index.dims() == other.dims(), Shape, op, "index ", describe(idx_t), " and ", what,
                " ", describe(other_t), " must have the same number of dims");
  for (int64_t d = 0; d < index.dims(); ++d)
    ADJOINT_CHECK((skip_dim && d == dim) || index.shape[d] <= other.shape[d], Shape, op, "index ",
                  describe(idx_t), " is larger than ", what, " ", describe(other_t), " in dim ", d);
}

}  // namespace

Tensor cpu::index_select(const Tensor& x, int64_t dim, const Tensor& index, const char* op) {
  const Layout xl(x);
  const int64_t d = checked_dim(xl, dim, op);
  ADJOINT_CHECK(index.dim() <= 1, Shape, op, "index must be 0-d or 1-d, got ", describe(index));
  Tensor idx = checked_index(index, xl.shape[d], d, x, op);
  Shape out_shape = x.shape();
  if (x.dim() == 0) {
    ADJOINT_CHECK(idx.numel() == 1, Shape, op, "indexing a 0-d tensor takes one index, got ",
                  describe(index));
  } else {
    out_shape[d] = idx.numel();
  }
  Tensor out = make_empty(out_shape, x.dtype());
  // Nothing to copy: return before the row loop, whose count outer * k alone may be 2^42 (a
  // [2^40, 4, 0] input along dim 1 was a hang found by fuzz_ops).
  if (out.numel() == 0) return out;
  Tensor src = contiguous_copy(x);
  const Split3 s(xl.shape, d);
  const int64_t k = idx.numel();
  const std::size_t row = static_cast<std::size_t>(s.inner) * itemsize(x.dtype());
  const char* in = static_cast<const char*>(src.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  const int64_t* ip = idx.data_ptr<int64_t>();
  // out[a, j, :] = x[a, index[j], :]: each output row is one memcpy.
  parallel_for(s.outer * k, std::max<int64_t>(32768 / std::max<int64_t>(s.inner, 1), 1),
               [&](int64_t begin, int64_t end) {
                 for (int64_t r = begin; r < end; ++r) {
                   const int64_t a = r / k, j = r % k;
                   if (row) std::memcpy(o + r * row, in + (a * s.n + ip[j]) * row, row);
                 }
               });
  return out;
}

Tensor cpu::gather(const Tensor& x, int64_t dim, const Tensor& index, const char* op) {
  const Layout xl(x), il(index);
  const int64_t d = checked_dim(xl, dim, op);
  check_index_fits(il, xl, d, true, index, x, "input", op);
  Tensor idx = checked_index(index, xl.shape[d], d, x, op);
  Tensor out = make_empty(index.shape(), x.dtype());
  const std::size_t item = itemsize(x.dtype());
  const char* in = static_cast<const char*>(x.raw_data());
  char* o = static_cast<char*>(out.raw_data());
  const int64_t* ip = idx.data_ptr<int64_t>();
  // out[p] = x[p with p[dim] replaced by index[p]]
  for_each_position(il.shape, [&](int64_t flat, const Shape& pos) {
    int64_t off = 0;
    for (int64_t k = 0; k < xl.dims(); ++k) off += (k == d ? ip[flat] : pos[k]) * xl.strides[k];
    std::memcpy(o + flat * item, in + off * static_cast<int64_t>(item), item);
  });
  return out;
}

Tensor cpu::scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                        const char* op) {
  ADJOINT_CHECK(x.dtype() == src.dtype(), DType, op, "input ", describe(x), " and src ",
                describe(src), " must have the same dtype");
  if (is_reduced(x))  // See Note [Reduced-precision kernels]
    return narrow_to(scatter_add(widen(x), dim, index, widen(src), op), x.dtype());
  const Layout xl(x), il(index), sl(src);
  const int64_t d = checked_dim(xl, dim, op);
  check_index_fits(il, xl, d, true, index, x, "input", op);
  check_index_fits(il, sl, d, false, index, src, "src", op);
  Tensor idx = checked_index(index, xl.shape[d], d, x, op);
  Tensor out = cast(x, x.dtype());
  const Shape out_strides = Layout(out).strides;
  const int64_t* ip = idx.data_ptr<int64_t>();
  dispatch_opmath_all(x.dtype(), op, [&]<class T>() {
    T* o = static_cast<T*>(out.raw_data());
    const T* sp = static_cast<const T*>(src.raw_data());
    // out[p with p[dim] = index[p]] += src[p], over p in row-major order
    for_each_position(il.shape, [&](int64_t flat, const Shape& pos) {
      int64_t oo = 0, so = 0;
      for (int64_t k = 0; k < xl.dims(); ++k) {
        oo += (k == d ? ip[flat] : pos[k]) * out_strides[k];
        so += pos[k] * sl.strides[k];
      }
      o[oo] = static_cast<T>(add_wrap(o[oo], sp[so]));
    });
  });
  return out;
}

Tensor cpu::index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source,
                      const char* op) {
  ADJOINT_CHECK(x.dtype() == source.dtype(), DType, op, "input ", describe(x), " and source ",
                describe(source), " must have the same dtype");
  if (is_reduced(x))  // See Note [Reduced-precision kernels]
    return narrow_to(index_add(widen(x), dim, index, widen(source), op), x.dtype());
  const Layout xl(x);
  const int64_t d = checked_dim(xl, dim, op);
  ADJOINT_CHECK(index.dim() <= 1, Shape, op, "index must be 0-d or 1-d, got ", describe(index));
  Tensor idx = checked_index(index, xl.shape[d], d, x, op);
  const int64_t k = idx.numel();
  Shape expected = x.shape();
  if (x.dim() > 0) expected[d] = k;
  // A 0-d input takes one source value per index (a 0-d source only with one index: the
  // loop below reads k values of it).
  ADJOINT_CHECK(x.dim() > 0 ? source.shape() == expected : source.dim() <= 1 && source.numel() == k,
                Shape, op, "source ", describe(source), " must have shape ", expected, " (input ",
                describe(x), " with ", k, " indices along dim ", d, ")");
  Tensor out = cast(x, x.dtype());
  Tensor srcc = contiguous_copy(source);
  const Split3 s(xl.shape, d);
  // Nothing to add: return before the loops, whose outer count alone may be 2^40 (a
  // [2^40, 0] input along dim 1 was a hang found by fuzz_ops).
  if (k == 0 || s.inner == 0 || s.outer == 0) return out;
  const int64_t* ip = idx.data_ptr<int64_t>();
  dispatch_opmath_all(x.dtype(), op, [&]<class T>() {
    T* o = static_cast<T*>(out.raw_data());
    const T* sp = static_cast<const T*>(srcc.raw_data());
    // out[a, index[j], :] += source[a, j, :], j ascending for every output element
    for (int64_t a = 0; a < s.outer; ++a)
      for (int64_t j = 0; j < k; ++j) {
        T* orow = o + (a * s.n + ip[j]) * s.inner;
        const T* srow = sp + (a * k + j) * s.inner;
        for (int64_t i = 0; i < s.inner; ++i) orow[i] = static_cast<T>(add_wrap(orow[i], srow[i]));
      }
  });
  return out;
}

}  // namespace adjoint::kernels
