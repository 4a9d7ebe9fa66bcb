// Conversions and copies: to(dtype), clone, contiguous; and the broadcasting pair
// expand / sum_to, which are each other's VJP.
#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/tensor_impl.h"
#include "core/op_fields.h"
#include "core/op_scope.h"
#include "core/op_tracer.h"
#include "ops/common.h"

namespace adjoint {
namespace {

struct ToDtype {
  static constexpr const char* name = "to";
  auto fields() { return std::tie(dtype); }
  static constexpr Save save = Save::None;
  static constexpr Batching batching = Batching::Pointwise;
  static constexpr bool is_dtype_cast = true;  // Node::is_dtype_cast
  DType dtype;
  Tensor forward(const Tensor& x) const { return kernels::cast(x, dtype); }
  // Fuses between floating dtypes of one opmath dtype (compile's fusible() checks the input).
  PointwiseKernel fusion() const { return PointwiseKernel::cast(); }
  // d/dx cast(x) = 1 (apply casts the gradient back to x's dtype).
  Tensor vjp(const Ctx&, const Tensor& gy) const { return gy; }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return tx.to(dtype); }
};

struct Clone {
  static constexpr const char* name = "clone";
  static constexpr Save save = Save::None;
  static constexpr Batching batching = Batching::Pointwise;
  Tensor forward(const Tensor& x) const { return kernels::cast(x, x.dtype()); }
  Tensor vjp(const Ctx&, const Tensor& gy) const { return gy; }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return tx; }
};

/// The shape expand() makes of a tensor of shape `x` (`what` describes it) asked for `shape_in`
/// (-1 keeps a size), or an error: expand()'s checks, which an imported Expand passes too.
Shape expanded_shape(const Shape& x, const Shape& shape_in, const std::string& what) {
  ADJOINT_CHECK(shape_in.size() >= x.size(), Shape, "expand", "cannot expand ", what,
                " to fewer dims ", shape_in);
  Shape shape = shape_in;
  const std::size_t lead = shape.size() - x.size();
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i >= lead && shape[i] == -1) shape[i] = x[i - lead];
    ADJOINT_CHECK(shape[i] >= 0, Shape, "expand", "invalid size ", shape_in[i], " in ", shape_in);
    if (i >= lead) {
      int64_t have = x[i - lead];
      ADJOINT_CHECK(have == shape[i] || have == 1, Shape, "expand", "cannot expand ", what, " to ",
                    shape_in, ": dim ", i, " has size ", have, " (must be 1 or ", shape[i], ")");
    }
  }
  return shape;
}

/// sum_to()'s checks: a tensor of shape `x` sums down to `shape` when `shape` broadcasts to x.
void check_sum_to(const Shape& x, const Shape& shape, const std::string& what) {
  ADJOINT_CHECK(shape.size() <= x.size() && broadcast_shapes(shape, x, "sum_to") == x, Shape,
                "sum_to", "cannot sum ", what, " down to ", shape);
}

struct Expand {
  static constexpr const char* name = "expand";
  auto fields() { return std::tie(shape); }
  static constexpr Save save = Save::None;
  Shape shape;
  Tensor forward(const Tensor& x) const {
    const std::size_t lead = shape.size() - x.dim();
    Shape strides(shape.size(), 0);
    for (std::size_t i = 0; i < static_cast<std::size_t>(x.dim()); ++i)
      strides[lead + i] = x.shape()[i] == 1 && shape[lead + i] != 1 ? 0 : x.strides()[i];
    return make_view(x, shape, strides, x.storage_offset());
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& x = spec_of(in, 0, name);
    ADJOINT_CHECK(expanded_shape(x.shape, shape, describe(x)) == shape, Shape, name, "shape ",
                  shape, " keeps a -1");
    return {shape, x.dtype};
  }
  // The VJP of broadcasting is summing back.
  Tensor vjp(const Ctx& c, const Tensor& gy) const { return sum_to(gy, c.input_shape(0)); }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return expand(tx, shape); }
  Tensor vmap(const BatchArgs& b) const {
    return expand(b.aligned(0, static_cast<int64_t>(shape.size())),
                  detail::with_batch_size(shape, b.size()));
  }
};

struct SumTo {
  static constexpr const char* name = "sum_to";
  auto fields() { return std::tie(shape); }
  static constexpr Save save = Save::None;
  Shape shape;
  // The dims of an input of shape `in` that are summed: its leading extra dims, and those that
  // `shape` has as 1.
  std::vector<int64_t> summed_dims(const Shape& in) const {
    const std::size_t lead = in.size() - shape.size();
    std::vector<int64_t> dims;
    for (std::size_t i = 0; i < in.size(); ++i)
      if (i < lead || (shape[i - lead] == 1 && in[i] != 1)) dims.push_back(static_cast<int64_t>(i));
    return dims;
  }
  detail::OutputSpec infer(std::span<const detail::ValueSpec> in) const {
    const detail::ValueSpec& x = spec_of(in, 0, name);
    check_sum_to(x.shape, shape, describe(x));
    return {shape, x.dtype};
  }
  Tensor forward(const Tensor& x) const {
    const std::vector<int64_t> dims = summed_dims(x.shape());
    Tensor r = dims.empty() ? kernels::cast(x, x.dtype())
                            : kernels::reduce(kernels::Reduce::Sum, x, dims, true);
    return reshape_fresh(r, shape);
  }
  // A sum over those dims (compile's fusion ends a group with it), unless there are none.
  std::optional<detail::ReductionKernel> reduction(const Shape& in) const {
    std::vector<int64_t> dims = summed_dims(in);
    if (dims.empty()) return std::nullopt;
    return detail::ReductionKernel{kernels::Reduce::Sum, std::move(dims), true};
  }
  Tensor vjp(const Ctx& c, const Tensor& gy) const { return expand(gy, c.input_shape(0)); }
  Tensor jvp(const Ctx&, const Tensor& tx) const { return sum_to(tx, shape); }
  // Batching: the logical leading dims are summed first, so that sum_to never reaches the batch.
  Tensor vmap(const BatchArgs& b) const {
    const int64_t lead = b.logical_dim(0) - static_cast<int64_t>(shape.size());
    Tensor x = b[0];
    if (lead > 0) {
      std::vector<int64_t> dims;
      for (int64_t i = 1; i <= lead; ++i) dims.push_back(i);
      x = sum(x, dims);
    }
    return sum_to(x, detail::with_batch_size(shape, b.size()));
  }
};

}  // namespace

Tensor to(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  return apply(ToDtype{dtype}, x);
}
// Moving between devices is not an op of the stack yet: with cpu and meta the only devices, a
// gradient could only cross from meta, which has no values to carry, and no test could check
// one. So a tensor that would record is refused by name, not silently cut from its graph; the
// differentiable copy comes with a second device that has memory (docs/devices.md).
Tensor to(const Tensor& x, Device device) {
  if (x.device() == device) return x;
  detail::OpScope scope("to");
  ADJOINT_CHECK(!(x.requires_grad() && is_grad_enabled()), Autograd, "to",
                "moving a tensor that requires grad (", describe(x), ") from ", x.device(), " to ",
                device,
                " is not differentiable in this version; detach() it first, or build "
                "the module on the device (DeviceGuard)");
  ADJOINT_CHECK(!x.impl()->batched, NotImplemented, "to",
                "moving a tensor between devices inside vmap is not supported (", describe(x), ")");
  detail::check_traceable("to", "it moves a tensor between devices");
  return kernels::to_device(x, device);
}
Tensor clone(const Tensor& x) { return apply(Clone{}, x); }
Tensor contiguous(const Tensor& x) { return x.is_contiguous() ? x : clone(x); }

Tensor expand(const Tensor& x, const Shape& shape_in) {
  const Shape shape = expanded_shape(x.shape(), shape_in, describe(x));
  if (shape == x.shape()) return x;
  // The view's size is checked where it is made (Note [Tensor size limits]); name this op.
  detail::OpScope scope("expand");
  return apply(Expand{shape}, x);
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  check_sum_to(x.shape(), shape, describe(x));
  return apply(SumTo{shape}, x);
}

Tensor Tensor::to(DType dtype) const { return adjoint::to(*this, dtype); }
Tensor Tensor::to(Device device) const { return adjoint::to(*this, device); }
Tensor Tensor::to_empty(Device device) const {
  detail::OpScope scope("to_empty");
  return make_empty(shape(), dtype(), device);
}
Tensor Tensor::clone() const { return adjoint::clone(*this); }
Tensor Tensor::contiguous() const { return adjoint::contiguous(*this); }
Tensor Tensor::expand(const Shape& shape) const { return adjoint::expand(*this, shape); }
Tensor Tensor::expand_as(const Tensor& other) const {
  return adjoint::expand(*this, other.shape());
}

}  // namespace adjoint

ADJOINT_OPS_FILE(conversion)
