// The meta device's core kernels: the shape and dtype each CPU kernel gives, the checks that
// need no values, and no computation. Writes (the *_into kernels, fills, draws) do nothing.
#include "adjoint/error.h"
#include "backend/device_kernels.h"
#include "backend/meta/meta_util.h"
#include "core/op_scope.h"

namespace adjoint::kernels::meta {
namespace {

bool returns_bool(Unary k) { return k >= Unary::EqScalar; }

// The result shape of a reduction over `dims` (empty: all), with the CPU kernel's checks.
struct Reduced {
  Shape shape;
  int64_t per_output = 1, outputs = 1;
};
Reduced reduced_shape(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                      const char* op) {
  const int64_t nd = x.dim();
  std::vector<bool> reduced(nd, dims.empty());
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, nd, op);
    if (nd > 0) {
      ADJOINT_CHECK(!reduced[w] || dims.empty(), Value, op, "dim ", d, " appears more than once");
      reduced[w] = true;
    }
  }
  Reduced r;
  for (int64_t i = 0; i < nd; ++i) {
    if (reduced[i]) {
      if (keepdim) r.shape.push_back(1);
      r.per_output *= x.shape()[i];
    } else {
      r.shape.push_back(x.shape()[i]);
      r.outputs *= x.shape()[i];
    }
  }
  return r;
}

const char* reduce_name(Reduce k) {
  switch (k) {
    case Reduce::Sum:
      return "sum";
    case Reduce::Prod:
      return "prod";
    case Reduce::Max:
      return "max";
    case Reduce::Min:
      return "min";
  }
  return "reduce";
}

}  // namespace

Tensor unary(Unary k, const Tensor& x, double, double) {
  return result(x.shape(), returns_bool(k) ? DType::Bool : x.dtype());
}
void unary_into(Unary, const Tensor&, const Tensor&, double, double) {}

Tensor binary(Binary k, const Tensor& a, const Tensor& b) {
  return result(broadcast_shapes(a.shape(), b.shape(), "binary"),
                k >= Binary::Eq ? DType::Bool : a.dtype());
}
void binary_into(Binary, const Tensor&, const Tensor&, const Tensor&) {}
void add_scaled_into(const Tensor&, const Tensor&, double) {}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  return result(
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where"),
      a.dtype());
}

Tensor to_device(const Tensor& x, Device device) {
  if (device.is_meta()) return result(x.shape(), x.dtype());
  throw Error(ErrorKind::Device, detail::current_op("to"),
              detail::str("cannot copy a meta tensor (", describe(x), ") to ", device,
                          ": it has no data; to_empty(", device,
                          ") makes uninitialised memory of its shape"));
}
Tensor cast(const Tensor& x, DType dtype) { return result(x.shape(), dtype); }
void copy_into(const Tensor&, const Tensor&) {}
void fill(const Tensor&, Scalar) {}
// A meta tensor has no values to hand over: the error names the current op.
void copy_to_host(const Tensor& x, void*) { detail::check_has_data(*x.impl()); }
void copy_from_host(const Tensor& x, const void*) { detail::check_has_data(*x.impl()); }

Tensor cumsum(const Tensor& x, int64_t, bool) { return result(x.shape(), x.dtype()); }
Tensor cumprod(const Tensor& x, int64_t, bool) { return result(x.shape(), x.dtype()); }
Tensor linear_recurrence(const Tensor&, const Tensor& b, int64_t, bool) {
  return result(b.shape(), b.dtype());
}

Tensor reduce(Reduce k, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const char* op = reduce_name(k);
  const Reduced r = reduced_shape(x, dims, keepdim, op);
  ADJOINT_CHECK(r.per_output > 0 || (k != Reduce::Max && k != Reduce::Min) || r.outputs == 0, Shape,
                op, "cannot reduce over an empty dimension (input ", describe(x), ")");
  const DType dtype = is_floating(x.dtype())                    ? x.dtype()
                      : (k == Reduce::Sum || k == Reduce::Prod) ? DType::Int64
                                                                : x.dtype();
  return result(r.shape, dtype);
}

Tensor exclusive_products(const Tensor& x, const std::vector<int64_t>&) {
  return result(x.shape(), x.dtype());
}

Tensor arg_reduce(ArgReduce k, const Tensor& x, int64_t dim, bool keepdim) {
  const char* op = k == ArgReduce::ArgMax ? "argmax" : "argmin";
  const Reduced r = reduced_shape(x, {dim}, keepdim, op);
  ADJOINT_CHECK(r.per_output > 0, Shape, op, "cannot reduce over an empty dimension (input ",
                describe(x), ")");
  return result(r.shape, DType::Int64);
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  Shape shape = a.shape();
  shape[shape.size() - 1] = b.shape().back();
  return result(shape, a.dtype());
}
Tensor linear(const Tensor& x, const Tensor& w, const Tensor&) {
  Shape shape = x.shape();
  shape[shape.size() - 1] = w.shape()[0];
  return result(shape, x.dtype());
}
void matmul_add_into(const Tensor&, const Tensor&, const Tensor&) {}
void matmul_widened_add_into(const Tensor&, const Tensor&, const Tensor&) {}
void add_widened_into(const Tensor&, const Tensor&, DType) {}

// Indexing: the index values (and so their bounds) are data, which meta does not have.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, const char*) {
  Shape shape = x.shape();
  if (!shape.empty()) shape[static_cast<std::size_t>(dim)] = index.numel();
  return result(shape, x.dtype());
}
Tensor gather(const Tensor& x, int64_t, const Tensor& index, const char*) {
  return result(index.shape(), x.dtype());
}
Tensor scatter_add(const Tensor& x, int64_t, const Tensor&, const Tensor&, const char*) {
  return result(x.shape(), x.dtype());
}
Tensor index_add(const Tensor& x, int64_t, const Tensor&, const Tensor&, const char*) {
  return result(x.shape(), x.dtype());
}

Tensor softmax(const Tensor& x, int64_t, bool) { return result(x.shape(), x.dtype()); }
Tensor softmax_backward(const Tensor& gy, const Tensor& y, int64_t, bool) {
  return result(broadcast_shapes(gy.shape(), y.shape(), "softmax_backward"), gy.dtype());
}
Tensor masked_softmax(const Tensor& x, const Tensor&, int64_t) {
  return result(x.shape(), x.dtype());
}

void arange(const Tensor&, double, double) {}
void uniform(const Tensor&, double, double, Generator&) {}
void normal(const Tensor&, double, double, Generator&) {}
void randint(const Tensor&, int64_t, int64_t, Generator&) {}

}  // namespace adjoint::kernels::meta
