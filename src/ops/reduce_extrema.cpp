// Extrema: max/min over all elements, max/min along a dim with their indices, amax/amin over
// dims, and the (non-differentiable) argmax/argmin. amax-style gradients are split evenly
// among tied extrema (as PyTorch); max/min along a dim gather at the returned index, so their
// gradient goes to that element only. Sum, mean and the statistical reductions live in reduce*.cpp.
#include "adjoint/error.h"
#include "ops/no_derivative.h"
#include "ops/reduce_util.h"

namespace adjoint {
namespace {

using kernels::ArgReduce;
using kernels::Reduce;

void check_nonempty(const Tensor& x, const std::vector<int64_t>& dims, const char* op) {
  for (int64_t d : dims)
    ADJOINT_CHECK(x.shape()[d] != 0, Shape, op, "cannot reduce over the empty dim ", d,
                  " of input ", describe(x), " (an extremum of no elements is undefined)");
  if (x.dim() == 0 || dims.empty())
    ADJOINT_CHECK(x.numel() != 0, Shape, op, "cannot reduce an empty input ", describe(x));
}

// amax/amin over dims (kAll: max()/min() over every element, which differ only in name).
template <bool kMax, bool kAll>
struct Extremum {
  static constexpr const char* name = kAll ? (kMax ? "max" : "min") : (kMax ? "amax" : "amin");
  auto fields() { return std::tie(dims, keepdim); }
  static constexpr Save save = Save::InputsAndOutput;
  std::vector<int64_t> dims;  // normalized
  bool keepdim;
  Tensor forward(const Tensor& x) const {
    return kernels::reduce(kMax ? Reduce::Max : Reduce::Min, x, dims, keepdim);
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    return reduced_spec(spec_of(in, 0, name), dims, keepdim, name);
  }
  detail::ReductionKernel reduction() const {
    return {kMax ? Reduce::Max : Reduce::Min, dims, keepdim};
  }
  // d amax(x)/dx_i = [x_i == amax] / (number of ties): split evenly among tied extrema. A NaN
  // extremum matches nothing, so amax's gradient is NaN there (0 / 0), as PyTorch's; max()
  // over all elements instead splits it among the NaNs, as PyTorch's evenly_distribute_backward.
  Tensor weights(const Ctx& c) const {
    const Tensor& x = c.input(0);
    Tensor y = keepdim ? c.output() : c.output().reshape(keepdim_shape(x.shape(), dims));
    Tensor hit = eq(x, y);
    if (kAll) hit = logical_or(hit, logical_and(ne(x, x), ne(y, y)));
    hit = hit.to(x.dtype());
    return hit / sum(hit, dims, true);
  }
  Tensor vjp(const Ctx& c, const Tensor& gy) const {
    return expand_reduced(gy, c.input_shape(0), dims, keepdim) * weights(c);
  }
  Tensor jvp(const Ctx& c, const Tensor& tx) const { return sum(tx * weights(c), dims, keepdim); }
  Tensor vmap(const BatchArgs& b) const {
    const detail::BatchedReduction r = detail::batched_reduction(b, dims, keepdim);
    return apply(Extremum{r.dims, r.keepdim}, r.x);
  }
};

template <bool kMax>
Tensor extremum_all(const Tensor& x) {
  const char* op = kMax ? "max" : "min";
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined tensor");
  std::vector<int64_t> d = normalize_dims({}, x.dim(), op);
  check_nonempty(x, d, op);
  return apply(Extremum<kMax, true>{d, false}, x);
}

template <bool kMax>
Tensor extremum_dims(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const char* op = kMax ? "amax" : "amin";
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined tensor");
  std::vector<int64_t> d = normalize_dims(dims, x.dim(), op);
  check_nonempty(x, d, op);
  return apply(Extremum<kMax, false>{d, keepdim}, x);
}

// argmax/argmin: an int64 result, so nothing to differentiate (Note [Ops without derivatives]
// in src/ops/no_derivative.h); through the stack, so vmap batches it, compile records it and
// export writes it.
template <bool kMax>
struct ArgExtremum : detail::NoDerivative<1> {
  static constexpr const char* name = kMax ? "argmax" : "argmin";
  static constexpr ArgReduce kind = kMax ? ArgReduce::ArgMax : ArgReduce::ArgMin;
  auto fields() { return std::tie(dim, keepdim); }
  std::optional<int64_t> dim;  // normalized; none: the index into the flattened input
  bool keepdim = false;
  Tensor forward(const Tensor& x) const {
    if (dim) return kernels::arg_reduce(kind, x, *dim, keepdim);
    // The flattened input is a view of a contiguous copy, made below the stack.
    const Tensor c = x.is_contiguous() ? x : kernels::cast(x, x.dtype());
    const Tensor flat = make_view(c, {c.numel()}, {1}, c.impl()->offset);
    const Tensor r = kernels::arg_reduce(kind, flat, 0, false);
    return keepdim ? make_view(r, Shape(static_cast<std::size_t>(x.dim()), 1),
                               Shape(static_cast<std::size_t>(x.dim()), 1), 0)
                   : r;
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& x = spec_of(in, 0, name);
    const auto rank = static_cast<int64_t>(x.shape.size());
    if (dim) {
      ADJOINT_CHECK(*dim >= 0 && *dim < std::max<int64_t>(rank, 1), Value, name, "dim ", *dim,
                    " is out of range for an input of shape ", x.shape);
      detail::OutputSpec s = reduced_spec(
          x, rank == 0 ? std::vector<int64_t>{} : std::vector<int64_t>{*dim}, keepdim, name);
      s.dtype = DType::Int64;
      return s;
    }
    ADJOINT_CHECK(x.shape.numel() != 0, Shape, name, "cannot reduce an empty input of shape ",
                  x.shape);
    return {keepdim ? Shape(static_cast<std::size_t>(rank), 1) : Shape{}, DType::Int64};
  }
  // Batched: the same reduction past the batch dim (over each example's flattened values
  // without a dim). A logical 0-d input gets a dim of one to reduce, so the batch dim is never
  // reduced.
  Tensor vmap(const BatchArgs& b) const {
    const int64_t rank = b.logical_dim(0);
    const Tensor phys = rank == 0 ? b[0].unsqueeze(1) : b[0];
    if (dim) return apply(ArgExtremum{{}, *dim + 1, keepdim && rank > 0}, phys);
    Tensor r = apply(ArgExtremum{{}, 1, false}, phys.reshape({phys.size(0), -1}));
    if (keepdim)
      r = r.reshape(detail::with_batch_size(Shape(static_cast<std::size_t>(rank), 1), b.size()));
    return r;
  }
};

template <bool kMax>
Tensor arg_extremum(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  const char* op = ArgExtremum<kMax>::name;
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined tensor");
  if (dim) {
    const int64_t d = wrap_dim(*dim, x.dim(), op);
    if (x.dim() > 0)
      ADJOINT_CHECK(x.shape()[d] != 0, Shape, op, "cannot reduce over the empty dim ", d,
                    " of input ", describe(x));
    return apply(ArgExtremum<kMax>{{}, d, keepdim}, x);
  }
  ADJOINT_CHECK(x.numel() != 0, Shape, op, "cannot reduce an empty input ", describe(x));
  return apply(ArgExtremum<kMax>{{}, std::nullopt, keepdim}, x);
}

template <bool kMax>
std::pair<Tensor, Tensor> extremum_along(const Tensor& x, int64_t dim, bool keepdim) {
  const char* op = kMax ? "max" : "min";
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined tensor");
  const int64_t d = wrap_dim(dim, x.dim(), op);
  if (x.dim() > 0) check_nonempty(x, {d}, op);
  if (x.dim() == 0) return {x.clone(), arg_extremum<kMax>(x, d, keepdim)};
  // values = x at the index along dim, so the gradient reaches the selected element only
  // (gather's VJP scatters it there). arg_extremum and gather both batch under vmap.
  Tensor index = arg_extremum<kMax>(x, d, true);
  Tensor values = gather(x, d, index);
  if (!keepdim) {
    values = values.squeeze(d);
    index = index.squeeze(d);
  }
  return {values, index};
}

}  // namespace

Tensor max(const Tensor& x) { return extremum_all<true>(x); }
Tensor min(const Tensor& x) { return extremum_all<false>(x); }
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum_along<true>(x, dim, keepdim);
}
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return extremum_along<false>(x, dim, keepdim);
}
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum_dims<true>(x, dims, keepdim);
}
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return extremum_dims<false>(x, dims, keepdim);
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extremum<true>(x, dim, keepdim);
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extremum<false>(x, dim, keepdim);
}

Tensor Tensor::max() const { return adjoint::max(*this); }
Tensor Tensor::min() const { return adjoint::min(*this); }
std::pair<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const {
  return adjoint::max(*this, dim, keepdim);
}
std::pair<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const {
  return adjoint::min(*this, dim, keepdim);
}
Tensor Tensor::amax(const std::vector<int64_t>& dims, bool keepdim) const {
  return adjoint::amax(*this, dims, keepdim);
}
Tensor Tensor::amin(const std::vector<int64_t>& dims, bool keepdim) const {
  return adjoint::amin(*this, dims, keepdim);
}
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const {
  return adjoint::argmax(*this, dim, keepdim);
}
Tensor Tensor::argmin(std::optional<int64_t> dim, bool keepdim) const {
  return adjoint::argmin(*this, dim, keepdim);
}

}  // namespace adjoint

ADJOINT_OPS_FILE(reduce_extrema)
