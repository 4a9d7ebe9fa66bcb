// Extrema: max/min over all elements, max/min along a dim with their indices, amax/amin over
// dims, and the (non-differentiable) argmax/argmin. amax-style gradients are split evenly
// among tied extrema (as PyTorch); max/min along a dim gather at the returned index, so their
// gradient goes to that element only. Sum, mean and the statistical reductions live in reduce*.cpp.
#include "adjoint/error.h"
#include "core/op_fields.h"
#include "core/op_tracer.h"
#include "dispatch/external_op.h"
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

Tensor arg_extremum(ArgReduce kind, const Tensor& x, std::optional<int64_t> dim, bool keepdim);

// How export writes an argmax or argmin (Note [Exporting ops]), and reads it back.
detail::ExternalExport arg_extremum_export(ArgReduce kind, std::optional<int64_t> dim,
                                           bool keepdim) {
  detail::FieldList fields;
  detail::put_field(fields, kind);
  detail::put_field(fields, dim);
  detail::put_field(fields, keepdim);
  return {"arg_extremum", std::move(fields)};
}

std::shared_ptr<const detail::TracedOp> arg_extremum_from_fields(const detail::FieldList& fields,
                                                                 const detail::OpImportContext&) {
  detail::FieldReader in(fields, "arg_extremum");
  ArgReduce kind{};
  std::optional<int64_t> dim;
  bool keepdim = false;
  detail::take_field(in, kind);
  detail::take_field(in, dim);
  detail::take_field(in, keepdim);
  in.finish();
  return std::make_shared<detail::ExternalOp>(
      kind == ArgReduce::ArgMax ? "argmax" : "argmin",
      [kind, dim, keepdim](std::span<const Tensor> t) {
        return arg_extremum(kind, t[0], dim, keepdim);
      },
      arg_extremum_export(kind, dim, keepdim), 1);
}

struct ArgExtremumTag {};
const bool arg_extremum_registered =
    (detail::register_exported_op("arg_extremum", typeid(ArgExtremumTag),
                                  &arg_extremum_from_fields),
     true);

Tensor arg_extremum(ArgReduce kind, const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  const char* op = kind == ArgReduce::ArgMax ? "argmax" : "argmin";
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined tensor");
  if (const int level = tls_mode.vmap_depth ? detail::top_batch_level({&x, 1}, op) : 0) {
    // Batched: the same reduction past the batch dim (over each example's flattened values
    // without a dim).
    // A logical 0-d input gets a dim of one to reduce, so the batch dim is never reduced.
    const Tensor phys =
        x.dim() == 0 ? detail::batch_front(x, level).unsqueeze(1) : detail::batch_front(x, level);
    Tensor r =
        dim ? arg_extremum(kind, phys, wrap_dim(*dim, x.dim(), op) + 1, keepdim && x.dim() > 0)
            : arg_extremum(kind, phys.reshape({phys.size(0), -1}), 1, false);
    if (!dim && keepdim)
      r = r.reshape(
          detail::with_batch_size(Shape(static_cast<std::size_t>(x.dim()), 1), phys.size(0)));
    return detail::make_batched(r, 0, level);
  }
  if (detail::tracing()) [[unlikely]]  // outside the stack: recorded for compile
    return detail::tls_op_tracer->record_external(
        op, {&x, 1},
        [kind, dim, keepdim](std::span<const Tensor> in) {
          return arg_extremum(kind, in[0], dim, keepdim);
        },
        nullptr, arg_extremum_export(kind, dim, keepdim));
  if (dim) return kernels::arg_reduce(kind, x, wrap_dim(*dim, x.dim(), op), keepdim);
  // No dim: the index into the flattened input (kept as all-ones dims with keepdim).
  ADJOINT_CHECK(x.numel() != 0, Shape, op, "cannot reduce an empty input ", describe(x));
  Tensor flat = x.detach().reshape({x.numel()});
  Tensor r = kernels::arg_reduce(kind, flat, 0, false);
  return keepdim ? reshape_fresh(r, Shape(static_cast<std::size_t>(x.dim()), 1)) : r;
}

template <bool kMax>
std::pair<Tensor, Tensor> extremum_along(const Tensor& x, int64_t dim, bool keepdim) {
  const char* op = kMax ? "max" : "min";
  ADJOINT_CHECK(x.defined(), Value, op, "got an undefined tensor");
  const int64_t d = wrap_dim(dim, x.dim(), op);
  if (x.dim() > 0) check_nonempty(x, {d}, op);
  const ArgReduce kind = kMax ? ArgReduce::ArgMax : ArgReduce::ArgMin;
  if (x.dim() == 0) return {x.clone(), arg_extremum(kind, x, d, keepdim)};
  // values = x at the index along dim, so the gradient reaches the selected element only
  // (gather's VJP scatters it there). arg_extremum and gather both batch under vmap.
  Tensor index = arg_extremum(kind, x, d, true);
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
  return arg_extremum(ArgReduce::ArgMax, x, dim, keepdim);
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extremum(ArgReduce::ArgMin, x, dim, keepdim);
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
