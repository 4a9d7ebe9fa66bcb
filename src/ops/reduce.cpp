// Sum and mean (the reductions other ops' rules are written with). The other reductions
// live in reduce_stats.cpp (var, std, prod, norm, logsumexp) and reduce_extrema.cpp.
#include "ops/reduce_util.h"

#include "adjoint/error.h"
#include "core/op_fields.h"

namespace adjoint {

std::vector<int64_t> normalize_dims(const std::vector<int64_t>& dims, int64_t ndim,
                                    const char* op) {
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t i = 0; i < ndim; ++i) out.push_back(i);
    return out;
  }
  std::vector<bool> seen(std::max<int64_t>(ndim, 1), false);
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, ndim, op);
    ADJOINT_CHECK(!seen[w], Value, op, "dim ", d, " appears more than once in the list of dims");
    seen[w] = true;
    if (ndim > 0) out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Shape keepdim_shape(const Shape& in, const std::vector<int64_t>& dims) {
  Shape s = in;
  for (int64_t d : dims) s[d] = 1;
  return s;
}

detail::OutputSpec reduced_spec(const detail::ValueSpec& x, const std::vector<int64_t>& dims,
                                bool keepdim, const char* op) {
  const auto rank = static_cast<int64_t>(x.shape.size());
  // normalize_dims gives every dim for an empty list; only a 0-d input keeps none.
  ADJOINT_CHECK((!dims.empty() || rank == 0) && normalize_dims(dims, rank, op) == dims, Value, op,
                "dims ", Shape(dims), " are not the normalized dims of a reduction of ",
                describe(x));
  Shape out;
  std::size_t next = 0;
  for (int64_t i = 0; i < rank; ++i) {
    const bool reduced = next < dims.size() && dims[next] == i;
    if (reduced) ++next;
    if (!reduced)
      out.push_back(x.shape[static_cast<std::size_t>(i)]);
    else if (keepdim)
      out.push_back(1);
  }
  return {out, std::nullopt};
}

Tensor expand_reduced(const Tensor& g, const Shape& input_shape, const std::vector<int64_t>& dims,
                      bool keepdim) {
  Tensor r = keepdim ? g : g.reshape(keepdim_shape(input_shape, dims));
  return r.expand(input_shape);
}

namespace {

struct Sum {
  static constexpr const char* name = "sum";
  auto fields() { return std::tie(dims, keepdim); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::None;
  std::vector<int64_t> dims;  // normalized
  bool keepdim;
  Tensor forward(const Tensor& x) const {
    return kernels::reduce(kernels::Reduce::Sum, x, dims, keepdim);
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return reduced_spec(spec_of(in, 0, name), dims, keepdim, name);
  }
  detail::ReductionKernel reduction() const { return {kernels::Reduce::Sum, dims, keepdim}; }
  // d/dx_i sum(x) = 1: the gradient is broadcast back over the reduced dims
  Tensor vjp(const Ctx& c, const Tensor& gy) const {
    return expand_reduced(gy, c.input_shape(0), dims, keepdim);
  }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return sum(tx, dims, keepdim); }
  // Batching: the same reduction over the dims past the batch dim.
  Tensor vmap(const BatchArgs& b) const {
    const detail::BatchedReduction r = detail::batched_reduction(b, dims, keepdim);
    return apply(Sum{r.dims, r.keepdim}, r.x);
  }
};

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  std::vector<int64_t> d = normalize_dims(dims, x.dim(), "sum");
  // As PyTorch: the sum or product of bools or narrow integers is an int64.
  Tensor in = is_integral(x.dtype()) && x.dtype() != DType::Int64 ? x.to(DType::Int64) : x;
  return apply(Sum{d, keepdim}, in);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  ADJOINT_CHECK(is_floating(x.dtype()), DType, "mean",
                "expected a floating tensor (convert with to()), got ", describe(x));
  std::vector<int64_t> d = normalize_dims(dims, x.dim(), "mean");
  int64_t count = 1;
  for (int64_t i : d) count *= x.shape()[i];
  // float16/bfloat16 sum and divide in float32 and round once, as PyTorch: the sum alone can
  // overflow float16 (100,000 ones) though the mean fits.
  if (is_reduced_float(x.dtype()))
    return (sum(x.to(opmath_dtype(x.dtype())), d, keepdim) / static_cast<double>(count))
        .to(x.dtype());
  return sum(x, d, keepdim) / static_cast<double>(count);
}

Tensor Tensor::sum() const { return adjoint::sum(*this); }
Tensor Tensor::sum(const std::vector<int64_t>& dims, bool keepdim) const {
  return adjoint::sum(*this, dims, keepdim);
}
Tensor Tensor::mean() const { return adjoint::mean(*this); }
Tensor Tensor::mean(const std::vector<int64_t>& dims, bool keepdim) const {
  return adjoint::mean(*this, dims, keepdim);
}

}  // namespace adjoint

ADJOINT_OPS_FILE(reduce)
