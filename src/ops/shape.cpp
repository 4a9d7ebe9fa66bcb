// Slicing and joining: slice, select and narrow (views), flatten, cat and stack (copies), and
// split and chunk (lists of slices). The primitives are Slice, Select, SliceScatter (the VJP of
// both views, itself differentiable so double backward works) and Cat. Pure restriding views
// (view, reshape, permute, squeeze, ...) live in view.cpp.

#include "adjoint/error.h"
#include "adjoint/tensor_impl.h"
#include "core/op_fields.h"
#include "ops/common.h"

namespace adjoint {
namespace {

// A normalised slice of one dim: elements start, start + step, ... (len of them).
struct SliceSpec {
  int64_t dim = 0, start = 0, step = 1, len = 0;
  auto fields() { return std::tie(dim, start, step, len); }
};

// What normalize_slice gives: a dim of `x`, and a start, step and length that stay inside it
// (an imported Slice or SliceScatter is checked against it: Note [Checking an imported graph]
// in src/export/import.cpp).
void check_slice(const Shape& x, const SliceSpec& s, const char* op) {
  const auto rank = static_cast<int64_t>(x.size());
  ADJOINT_CHECK(s.dim >= 0 && s.dim < rank, Index, op, "dim ", s.dim, " out of range for shape ",
                x);
  const int64_t n = x[static_cast<std::size_t>(s.dim)];
  int64_t last = 0;
  const bool inside = s.start >= 0 && s.step >= 1 && s.len >= 0 && s.len <= n &&
                      (s.len == 0 || (!__builtin_mul_overflow(s.len - 1, s.step, &last) &&
                                      !__builtin_add_overflow(last, s.start, &last) && last < n));
  ADJOINT_CHECK(inside, Index, op, "slice start ", s.start, ", step ", s.step, ", length ", s.len,
                " of dim ", s.dim, " does not stay inside shape ", x);
}

// The view of `x` that `s` describes (shares storage).
Tensor slice_view(const Tensor& x, const SliceSpec& s) {
  Shape shape = x.shape(), strides = x.strides();
  const int64_t offset = x.storage_offset() + s.start * strides[s.dim];
  shape[s.dim] = s.len;
  // A stride only matters between elements: with one (or none) a huge step must not overflow.
  if (s.len > 1) strides[s.dim] *= s.step;
  return make_view(x, shape, strides, offset);
}

// Python-style bounds: negatives count from the end, then both are clamped into [0, size].
SliceSpec normalize_slice(const Tensor& x, int64_t dim, std::optional<int64_t> start,
                          std::optional<int64_t> end, int64_t step, const char* op) {
  ADJOINT_CHECK(x.dim() > 0, Index, op, "cannot slice a 0-d tensor (", describe(x), ")");
  ADJOINT_CHECK(step > 0, Value, op, "step must be positive, got ", step);
  const int64_t d = wrap_dim(dim, x.dim(), op);
  const int64_t n = x.shape()[d];
  auto clamp = [n](int64_t v) { return std::min(std::max(v < 0 ? v + n : v, int64_t{0}), n); };
  const int64_t b = start ? clamp(*start) : 0;
  const int64_t e = end ? clamp(*end) : n;
  return {d, b, step, e > b ? (e - b - 1) / step + 1 : 0};  // ceil((e - b) / step), no overflow
}

// The scatter that undoes a slice: zeros of `shape` with `src` written into the slice `s`.
struct SliceScatter {
  static constexpr const char* name = "slice_scatter";
  auto fields() { return std::tie(shape, spec); }
  static constexpr Save save = Save::None;
  Shape shape;
  SliceSpec spec;
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& src = spec_of(in, 0, name);
    for (int64_t d : shape) ADJOINT_CHECK(d >= 0, Shape, name, "invalid size ", d, " in ", shape);
    check_slice(shape, spec, name);
    Shape want = shape;
    want[static_cast<std::size_t>(spec.dim)] = spec.len;
    ADJOINT_CHECK(src.shape == want, Shape, name, "source ", describe(src), " is not the slice ",
                  want, " of ", shape);
    return {shape, src.dtype};
  }
  Tensor forward(const Tensor& src) const {
    Tensor out = make_empty(shape, src.dtype(), src.device());
    if (spec.step == 1) {  // zero only what the copy does not write
      const int64_t end = spec.start + spec.len, n = shape[spec.dim];
      if (spec.start > 0) kernels::fill(slice_view(out, {spec.dim, 0, 1, spec.start}), 0);
      if (end < n) kernels::fill(slice_view(out, {spec.dim, end, 1, n - end}), 0);
    } else {
      kernels::fill(out, 0);
    }
    kernels::copy_into(slice_view(out, spec), src);
    return out;
  }
  // d/dsrc scatter(src) = the slice of the cotangent.
  Tensor vjp(const Ctx&, const Tensor& gy) const;
  Tensor jvp(const Ctx&, const Tensor& ts) const;
  Tensor vmap(const BatchArgs& b) const {
    SliceSpec s = spec;
    ++s.dim;
    return apply(SliceScatter{detail::with_batch_size(shape, b.size()), s}, b[0]);
  }
};

struct Slice {
  static constexpr const char* name = "slice";
  auto fields() { return std::tie(spec); }
  static constexpr Save save = Save::None;
  SliceSpec spec;
  Tensor forward(const Tensor& x) const { return slice_view(x, spec); }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& x = spec_of(in, 0, name);
    check_slice(x.shape, spec, name);
    Shape out = x.shape;
    out[static_cast<std::size_t>(spec.dim)] = spec.len;
    return {out, x.dtype};
  }
  // d slice(x) = slice(dx); its transpose scatters gy into zeros of x's shape.
  Tensor vjp(const Ctx& c, const Tensor& gy) const {
    return apply(SliceScatter{c.input_shape(0), spec}, gy);
  }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return apply(Slice{spec}, tx); }
  Tensor vmap(const BatchArgs& b) const {
    SliceSpec s = spec;
    ++s.dim;
    return apply(Slice{s}, b[0]);
  }
};

Tensor SliceScatter::vjp(const Ctx&, const Tensor& gy) const { return apply(Slice{spec}, gy); }
Tensor SliceScatter::jvp(const Ctx&, const Tensor& ts) const {
  return apply(SliceScatter{shape, spec}, ts);
}

// select(x, dim, i): the slice [i, i + 1) with dim dropped.
struct Select {
  static constexpr const char* name = "select";
  auto fields() { return std::tie(dim, index); }
  static constexpr Save save = Save::None;
  int64_t dim, index;
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& x = spec_of(in, 0, name);
    const auto rank = static_cast<int64_t>(x.shape.size());
    ADJOINT_CHECK(dim >= 0 && dim < rank && index >= 0 && index < x.shape[dim], Index, name,
                  "index ", index, " of dim ", dim, " out of range for ", describe(x));
    Shape out = x.shape;
    out.erase(dim);
    return {out, x.dtype};
  }
  Tensor forward(const Tensor& x) const {
    Shape shape = x.shape(), strides = x.strides();
    const int64_t offset = x.storage_offset() + index * strides[dim];
    shape.erase(dim);
    strides.erase(dim);
    return make_view(x, shape, strides, offset);
  }
  // d select(x) = select(dx); the VJP scatters gy into row `index` of zeros.
  Tensor vjp(const Ctx& c, const Tensor& gy) const {
    return apply(SliceScatter{c.input_shape(0), {dim, index, 1, 1}}, gy.unsqueeze(dim));
  }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return apply(Select{dim, index}, tx); }
  Tensor vmap(const BatchArgs& b) const { return apply(Select{dim + 1, index}, b[0]); }
};

// cat: copies each input into its stretch of the output along dim.
struct Cat {
  static constexpr const char* name = "cat";
  auto fields() { return std::tie(dim); }
  static constexpr Save save = Save::None;
  static constexpr bool variadic = true;
  int64_t dim;
  // cat()'s checks: one or more tensors of one rank and dtype, equal but along `dim`.
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& first = spec_of(in, 0, name);
    const auto rank = static_cast<int64_t>(first.shape.size());
    ADJOINT_CHECK(dim >= 0 && dim < rank, Index, name, "dim ", dim, " out of range for ",
                  describe(first));
    Shape out = first.shape, others = first.shape;  // others: the sizes but along dim
    out[dim] = others[dim] = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      const detail::ValueSpec& x = spec_of(in, i, name);
      Shape same = x.shape;
      if (same.size() == others.size()) same[dim] = 0;
      ADJOINT_CHECK(same == others && x.dtype == first.dtype, Shape, name, "tensor ", i, " ",
                    describe(x), " does not join ", describe(first), " along dim ", dim);
      out[dim] += x.shape[dim];
    }
    return {out, first.dtype};
  }
  Tensor forward(const std::vector<Tensor>& xs) const {
    Shape shape = xs[0].shape();
    shape[dim] = 0;
    for (const Tensor& x : xs) shape[dim] += x.shape()[dim];
    Tensor out = make_empty(shape, xs[0].dtype(), xs[0].device());
    int64_t at = 0;
    for (const Tensor& x : xs) {
      const int64_t len = x.shape()[dim];
      kernels::copy_into(slice_view(out, {dim, at, 1, len}), x);
      at += len;
    }
    return out;
  }
  // d cat(x_1, ..., x_n) = cat(dx_1, ..., dx_n): input i gets its stretch of gy.
  std::vector<Tensor> vjp(const Ctx& c, const Tensor& gy) const {
    std::vector<Tensor> grads(c.num_inputs());
    int64_t at = 0;
    for (std::size_t i = 0; i < grads.size(); ++i) {
      const int64_t len = c.input_shape(i)[dim];
      if (c.needs_grad(i)) grads[i] = slice(gy, dim, at, at + len);
      at += len;
    }
    return grads;
  }
  Tensor jvp(const Ctx&, const std::vector<Tensor>& ts) const { return cat(ts, dim); }
  // Batching: every input gets the batch dim (unbatched ones broadcast to it).
  Tensor vmap(const BatchArgs& b) const {
    std::vector<Tensor> xs;
    for (std::size_t i = 0; i < b.count(); ++i) xs.push_back(b.with_batch(i));
    return apply_list(Cat{dim + 1}, xs);
  }
};

// split and chunk make one tensor per piece. A dim expanded to 2^40 split into ones would
// build pieces until memory runs out, so a count whose handles alone could not fit in this
// machine's memory is refused first, as the allocation that cannot succeed (OutOfMemory).
void check_piece_count(int64_t pieces, const Tensor& x, const char* op) {
  constexpr int64_t kBytesPerPiece = sizeof(Tensor) + sizeof(TensorImpl) + 64;  // + refcounts
  const int64_t memory = physical_memory_bytes();
  ADJOINT_CHECK(memory <= 0 || pieces <= memory / kBytesPerPiece, OutOfMemory, op,
                "out of memory: ", pieces, " pieces of ", describe(x), " need at least ", pieces,
                " x ", kBytesPerPiece, " bytes, more than this machine's ", memory, " bytes");
}

// Slices of x along dim with the given lengths, in order (split and chunk).
std::vector<Tensor> split_by(const Tensor& x, const std::vector<int64_t>& sizes, int64_t d) {
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  int64_t at = 0;
  for (int64_t len : sizes) {
    out.push_back(apply(Slice{{d, at, 1, len}}, x));
    at += len;
  }
  return out;
}

}  // namespace

Tensor slice(const Tensor& x, int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
             int64_t step) {
  return apply(Slice{normalize_slice(x, dim, start, end, step, "slice")}, x);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  ADJOINT_CHECK(x.dim() > 0, Index, "select", "cannot select from a 0-d tensor (", describe(x),
                ")");
  const int64_t d = wrap_dim(dim, x.dim(), "select");
  const int64_t n = x.shape()[d];
  ADJOINT_CHECK(index >= -n && index < n, Index, "select", "index ", index,
                " is out of range for dim ", d, " of size ", n, " (input ", describe(x), ")");
  return apply(Select{d, index < 0 ? index + n : index}, x);
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  ADJOINT_CHECK(x.dim() > 0, Index, "narrow", "cannot narrow a 0-d tensor (", describe(x), ")");
  const int64_t d = wrap_dim(dim, x.dim(), "narrow");
  const int64_t n = x.shape()[d];
  ADJOINT_CHECK(start >= -n && start <= n, Index, "narrow", "start ", start,
                " is out of range for dim ", d, " of size ", n, " (input ", describe(x), ")");
  if (start < 0) start += n;
  ADJOINT_CHECK(length >= 0 && start + length <= n, Index, "narrow", "start ", start, " + length ",
                length, " exceeds dim ", d, " of size ", n, " (input ", describe(x), ")");
  return apply(Slice{{d, start, 1, length}}, x);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) return x.reshape({1});
  const int64_t s = wrap_dim(start_dim, x.dim(), "flatten");
  const int64_t e = wrap_dim(end_dim, x.dim(), "flatten");
  ADJOINT_CHECK(s <= e, Value, "flatten", "start_dim ", start_dim, " comes after end_dim ", end_dim,
                " for ", describe(x));
  Shape shape;
  for (int64_t i = 0; i < s; ++i) shape.push_back(x.shape()[i]);
  int64_t merged = 1;
  for (int64_t i = s; i <= e; ++i) merged *= x.shape()[i];
  shape.push_back(merged);
  for (int64_t i = e + 1; i < x.dim(); ++i) shape.push_back(x.shape()[i]);
  return x.reshape(shape);
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  ADJOINT_CHECK(!tensors.empty(), Value, "cat", "expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  ADJOINT_CHECK(first.defined(), Value, "cat", "tensor 0 is undefined");
  ADJOINT_CHECK(first.dim() > 0, Shape, "cat", "zero-dimensional tensor 0 (", describe(first),
                ") cannot be concatenated");
  const int64_t d = wrap_dim(dim, first.dim(), "cat");
  DType dtype = first.dtype();
  int64_t total = 0;  // the output's size along d
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    ADJOINT_CHECK(t.defined(), Value, "cat", "tensor ", i, " is undefined");
    ADJOINT_CHECK(t.dim() == first.dim(), Shape, "cat", "tensor ", i, " ", describe(t), " has ",
                  t.dim(), " dims but tensor 0 ", describe(first), " has ", first.dim());
    for (int64_t k = 0; k < first.dim(); ++k)
      ADJOINT_CHECK(k == d || t.shape()[k] == first.shape()[k], Shape, "cat",
                    "sizes must match except in dim ", d, ": tensor 0 is ", describe(first),
                    " but tensor ", i, " is ", describe(t));
    ADJOINT_CHECK(!__builtin_add_overflow(total, t.shape()[d], &total), Value, "cat",
                  "the sizes along dim ", d, " add up to more than 2^63 - 1");
    dtype = promote_types(dtype, t.dtype());
  }
  std::vector<Tensor> xs;
  xs.reserve(tensors.size());
  for (const Tensor& t : tensors) xs.push_back(cast_to(t, dtype));
  return apply_list(Cat{d}, xs);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  ADJOINT_CHECK(!tensors.empty(), Value, "stack", "expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  ADJOINT_CHECK(first.defined(), Value, "stack", "tensor 0 is undefined");
  const int64_t d = wrap_dim(dim, first.dim() + 1, "stack");
  std::vector<Tensor> xs;
  xs.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    ADJOINT_CHECK(t.defined(), Value, "stack", "tensor ", i, " is undefined");
    ADJOINT_CHECK(t.shape() == first.shape(), Shape, "stack",
                  "all tensors must have the same shape: tensor 0 is ", describe(first),
                  " but tensor ", i, " is ", describe(t));
    xs.push_back(t.unsqueeze(d));
  }
  return cat(xs, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  ADJOINT_CHECK(x.dim() > 0, Index, "split", "cannot split a 0-d tensor (", describe(x), ")");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  const int64_t n = x.shape()[d];
  ADJOINT_CHECK(split_size > 0 || (split_size == 0 && n == 0), Value, "split", "split_size ",
                split_size, " must be positive for dim ", d, " of size ", n, " (input ",
                describe(x), ")");
  if (n > 0) check_piece_count((n - 1) / split_size + 1, x, "split");
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += split_size) sizes.push_back(std::min(split_size, n - at));
  if (sizes.empty()) sizes.push_back(0);
  return split_by(x, sizes, d);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  ADJOINT_CHECK(x.dim() > 0, Index, "split", "cannot split a 0-d tensor (", describe(x), ")");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    ADJOINT_CHECK(s >= 0, Value, "split", "negative size ", s, " in split sizes");
    total += s;
  }
  ADJOINT_CHECK(total == x.shape()[d], Value, "split", "split sizes sum to ", total, " but dim ", d,
                " of ", describe(x), " has size ", x.shape()[d]);
  return split_by(x, sizes, d);
}

// torch.chunk: pieces of ceil(n / chunks); fewer pieces when they run out, except that an
// empty dim gives `chunks` empty pieces.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  ADJOINT_CHECK(chunks > 0, Value, "chunk", "chunks must be positive, got ", chunks);
  ADJOINT_CHECK(x.dim() > 0, Index, "chunk", "cannot chunk a 0-d tensor (", describe(x), ")");
  const int64_t d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t n = x.shape()[d];
  if (n == 0) {
    check_piece_count(chunks, x, "chunk");
    return split_by(x, std::vector<int64_t>(chunks, 0), d);
  }
  return split(x, (n + chunks - 1) / chunks, d);
}

Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end,
                     int64_t step) const {
  return adjoint::slice(*this, dim, start, end, step);
}
Tensor Tensor::select(int64_t dim, int64_t index) const {
  return adjoint::select(*this, dim, index);
}
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return adjoint::narrow(*this, dim, start, length);
}
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  return adjoint::flatten(*this, start_dim, end_dim);
}
std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const {
  return adjoint::split(*this, split_size, dim);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const {
  return adjoint::chunk(*this, chunks, dim);
}

}  // namespace adjoint

ADJOINT_OPS_FILE(shape)
