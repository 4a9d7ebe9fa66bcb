// Factories: empty, zeros, ones, full, arange, linspace, eye, and tensors from C++ data (the
// random draws are in random.cpp). Factory outputs are leaves; options.requires_grad marks them.
// Each factory names itself for the errors raised below it (a shape too large, memory the allocator
// cannot give, a fill value the dtype cannot hold): see Note [Current op].
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "backend/host_transfer.h"
#include "backend/kernels.h"
#include "core/dispatch.h"
#include "core/op_fields.h"
#include "core/op_scope.h"
#include "core/op_tracer.h"
#include "core/scalar_convert.h"
#include "core/tensor_factory.h"
#include "dispatch/external_op.h"

namespace adjoint {
namespace {
using detail::OpScope;

// Every factory's last step. While `compile` traces, the tensor is a constant of the graph
// (its values come from C++ values alone), with the factory's recipe when it gives one; the
// random ones are recorded as draws instead.
// `recipe` is called only while tracing: eager factories build no field lists.
template <class MakeRecipe>
Tensor finish(Tensor t, const TensorOptions& o, const MakeRecipe& recipe) {
  if (o.requires_grad()) t.requires_grad_(true);
  if (detail::tracing()) [[unlikely]]
    detail::tls_op_tracer->constant_made(t, recipe());
  return t;
}
Tensor finish(Tensor t, const TensorOptions& o) {
  return finish(std::move(t), o, [] { return detail::ExternalExport{}; });
}
// Zeroes a fresh tensor, by the kernel of its device (nothing on meta).
void clear(const Tensor& t) { kernels::fill(t, 0); }

// Recipes of the factories compile's dynamic sizes can make at other sizes (a filled tensor
// of the batch's shape, arange(T)): the factory and its arguments, read by
// constant_from_recipe.
enum class Recipe : int64_t { Full, Arange, Linspace, Eye };

// A recipe: its kind, then the factory's arguments, then the options.
template <class... Args>
detail::ExternalExport recipe(Recipe kind, const TensorOptions& o, const Args&... args) {
  detail::FieldList f;
  detail::put_field(f, kind);
  (detail::put_field(f, args), ...);
  detail::put_field(f, o.dtype());
  detail::put_field(f, o.requires_grad());
  return {"factory", std::move(f)};
}

detail::ExternalExport full_recipe(const Shape& shape, Scalar value, const TensorOptions& o) {
  return recipe(Recipe::Full, o, shape, value.kind(), value.to_double(),
                value.is_floating() ? int64_t{0} : value.to_int());
}

// full() under the caller's OpScope.
Tensor filled(const Shape& shape, Scalar value, const TensorOptions& o) {
  Tensor t = make_empty(shape, o.dtype(), o.device());
  kernels::fill(t, value);
  return finish(std::move(t), o, [&] { return full_recipe(shape, value, o); });
}
}  // namespace

namespace detail {

Tensor constant_from_recipe(const FieldList& fields) {
  FieldReader in(fields, "factory");
  Recipe kind{};
  take_field(in, kind);
  // Each recipe's arguments, in the order recipe() wrote them, then the options.
  auto read = [&in](auto&... args) {
    (take_field(in, args), ...);
    DType dtype{};
    bool requires_grad = false;
    take_field(in, dtype);
    take_field(in, requires_grad);
    in.finish();
    return TensorOptions(dtype).requires_grad(requires_grad);
  };
  switch (kind) {
    case Recipe::Full: {
      Shape shape;
      DType value_kind{};
      double d = 0;
      int64_t i = 0;
      const TensorOptions o = read(shape, value_kind, d, i);
      return full(shape,
                  value_kind == DType::Float64 ? Scalar(d)
                  : value_kind == DType::Bool  ? Scalar(i != 0)
                                               : Scalar(i),
                  o);
    }
    case Recipe::Arange: {
      double start = 0, end = 0, step = 0;
      const TensorOptions o = read(start, end, step);
      return arange(start, end, step, o);
    }
    case Recipe::Linspace: {
      double start = 0, end = 0;
      int64_t steps = 0;
      const TensorOptions o = read(start, end, steps);
      return linspace(start, end, steps, o);
    }
    case Recipe::Eye: {
      int64_t n = 0, cols = 0;
      const TensorOptions o = read(n, cols);
      return eye(n, cols, o);
    }
  }
  throw Error(ErrorKind::Value, "factory", str("unknown recipe ", static_cast<int64_t>(kind)));
}

}  // namespace detail

Tensor empty(const Shape& shape, TensorOptions o) {
  OpScope scope("empty");
  return finish(make_empty(shape, o.dtype(), o.device()), o);
}

Tensor full(const Shape& shape, Scalar value, TensorOptions o) {
  OpScope scope("full");
  return filled(shape, value, o);
}

Tensor zeros(const Shape& shape, TensorOptions o) {
  OpScope scope("zeros");
  Tensor t = make_empty(shape, o.dtype(), o.device());
  clear(t);
  return finish(std::move(t), o, [&] { return full_recipe(shape, 0, o); });
}

Tensor ones(const Shape& shape, TensorOptions o) {
  OpScope scope("ones");
  return filled(shape, 1, o);
}
Tensor scalar_tensor(Scalar value, TensorOptions o) {
  OpScope scope("scalar_tensor");
  return filled(Shape{}, value, o);
}
namespace {
// The *_like factories make their tensor on t's device, as PyTorch's do.
TensorOptions like(const Tensor& t) { return TensorOptions(t.dtype()).device(t.device()); }
}  // namespace
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), like(t)); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), like(t)); }
Tensor full_like(const Tensor& t, Scalar value) { return full(t.shape(), value, like(t)); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), like(t)); }

Tensor arange(int64_t end, TensorOptions o) { return arange(0, static_cast<double>(end), 1, o); }

Tensor arange(double start, double end, double step, TensorOptions o) {
  OpScope scope("arange");
  ADJOINT_CHECK(std::isfinite(step) && step != 0, Value, "arange",
                "step must be finite and nonzero, got ", step);
  ADJOINT_CHECK(std::isfinite(start) && std::isfinite(end), Value, "arange",
                "start and end must be finite, got ", start, " and ", end);
  const double n = std::ceil((end - start) / step);  // inf when end - start overflows
  ADJOINT_CHECK(n >= 0, Value, "arange", "the range [", start, ", ", end, ") with step ", step,
                " goes the wrong way");
  ADJOINT_CHECK(n < 0x1p63, Value, "arange", "the range [", start, ", ", end, ") with step ", step,
                " is too large: it has ", n, " elements, more than 2^63 - 1");
  if (!is_floating(o.dtype()) && n > 0) {
    const double last = start + step * (n - 1);
    ADJOINT_CHECK(detail::fits_int64(start) && detail::fits_int64(last), Value, "arange",
                  "the values of [", start, ", ", end, ") with step ", step,
                  " do not fit in an int64 tensor");
  }
  Tensor t = make_empty({static_cast<int64_t>(n)}, o.dtype(), o.device());
  kernels::arange(t, start, step);
  return finish(std::move(t), o, [&] { return recipe(Recipe::Arange, o, start, end, step); });
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions o) {
  OpScope scope("linspace");
  ADJOINT_CHECK(steps >= 0, Value, "linspace", "number of steps must be non-negative, got ", steps);
  ADJOINT_CHECK(is_floating(o.dtype()), DType, "linspace", "expected a floating dtype, got ",
                o.dtype());
  Tensor t = make_empty({steps}, o.dtype(), o.device());
  double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0;
  kernels::arange(t, start, step);
  if (steps > 1) kernels::fill(make_view(t, {}, {}, steps - 1), end);  // `end` exactly, as torch
  return finish(std::move(t), o, [&] { return recipe(Recipe::Linspace, o, start, end, steps); });
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions o) {
  OpScope scope("eye");
  int64_t cols = m.value_or(n);
  ADJOINT_CHECK(n >= 0 && cols >= 0, Value, "eye", "sizes must be non-negative, got ", n, " x ",
                cols);
  Tensor t = make_empty({n, cols}, o.dtype(), o.device());
  clear(t);
  for (int64_t i = 0; i < std::min(n, cols); ++i) {
    Tensor d = make_view(t, {}, {}, i * cols + i);
    kernels::fill(d, 1);
  }
  return finish(std::move(t), o, [&] { return recipe(Recipe::Eye, o, n, cols); });
}

template <class T>
Tensor tensor(const std::vector<T>& data, std::optional<Shape> shape, TensorOptions o) {
  OpScope scope("tensor");
  Shape s = shape.value_or(Shape{static_cast<int64_t>(data.size())});
  for (int64_t d : s) ADJOINT_CHECK(d >= 0, Value, "tensor", "negative dimension in shape ", s);
  ADJOINT_CHECK(s.numel() == static_cast<int64_t>(data.size()), Shape, "tensor", "shape ", s,
                " needs ", s.numel(), " elements but ", data.size(), " were given");
  // Staged on the CPU, then handed to the device (Note [Host transfers]); data given to meta
  // keeps its shape and dtype only, as PyTorch's meta device does.
  Tensor src = make_empty(s, dtype_of_v<T>);
  if constexpr (std::is_same_v<T, bool>) {
    const std::vector<uint8_t> bytes(data.begin(), data.end());  // std::vector<bool> packs bits
    detail::write_host_values<uint8_t>(src, bytes, "tensor");
  } else {
    detail::write_host_values<T>(src, data, "tensor");
  }
  Tensor t = src;
  if (o.dtype() != dtype_of_v<T>) t = kernels::cast(src, o.dtype());
  if (!o.device().is_cpu()) t = kernels::to_device(t, o.device());
  return finish(std::move(t), o);
}
template Tensor tensor<bool>(const std::vector<bool>&, std::optional<Shape>, TensorOptions);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, std::optional<Shape>, TensorOptions);
template Tensor tensor<uint8_t>(const std::vector<uint8_t>&, std::optional<Shape>, TensorOptions);
template Tensor tensor<int8_t>(const std::vector<int8_t>&, std::optional<Shape>, TensorOptions);
template Tensor tensor<int16_t>(const std::vector<int16_t>&, std::optional<Shape>, TensorOptions);
template Tensor tensor<int32_t>(const std::vector<int32_t>&, std::optional<Shape>, TensorOptions);
template Tensor tensor<float>(const std::vector<float>&, std::optional<Shape>, TensorOptions);
template Tensor tensor<double>(const std::vector<double>&, std::optional<Shape>, TensorOptions);

Tensor tensor(std::initializer_list<double> data, TensorOptions o) {
  return tensor(std::vector<double>(data), std::nullopt, o);
}
Tensor tensor(std::initializer_list<double> data, const Shape& shape, TensorOptions o) {
  return tensor(std::vector<double>(data), shape, o);
}

// ---- from_blob: caller memory wrapped without a copy ----
namespace {
// The storage's release callback: the caller's deleter, called once (the storage dies once),
// then the heap copy of it. Without a deleter the caller keeps the memory: nothing to do.
void release_with_deleter(void* ctx, void* data) {
  std::unique_ptr<std::function<void(void*)>> deleter(
      static_cast<std::function<void(void*)>*>(ctx));
  (*deleter)(data);
}
void release_nothing(void*, void*) {}
}  // namespace

Tensor from_blob(void* data, const Shape& shape, const Shape& strides,
                 std::function<void(void*)> deleter, TensorOptions o) {
  OpScope scope("from_blob");
  ADJOINT_CHECK(o.device().is_cpu(), Device, "from_blob",
                "caller memory is CPU memory; got device ", o.device());
  ADJOINT_CHECK(strides.size() == shape.size(), Shape, "from_blob", "shape ", shape, " has ",
                shape.size(), " dims but strides ", strides, " have ", strides.size());
  const std::size_t item = itemsize(o.dtype());
  int64_t last = 0;  // the highest element index the tensor reaches
  bool empty_shape = false;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    ADJOINT_CHECK(shape[d] >= 0, Value, "from_blob", "negative dimension in shape ", shape);
    ADJOINT_CHECK(strides[d] >= 0, Value, "from_blob", "negative stride in ", strides);
    if (shape[d] == 0)
      empty_shape = true;
    else
      last += (shape[d] - 1) * strides[d];
  }
  ADJOINT_CHECK(data != nullptr || empty_shape, Value, "from_blob", "a null pointer for ",
                shape.numel(), " elements");
  ADJOINT_CHECK(reinterpret_cast<std::uintptr_t>(data) % item == 0, Value, "from_blob",
                "the pointer is not aligned to ", o.dtype(), "'s ", item, " bytes");
  const std::size_t nbytes = empty_shape ? 0 : static_cast<std::size_t>(last + 1) * item;
  std::shared_ptr<StorageImpl> storage;
  if (deleter) {
    auto ctx = std::make_unique<std::function<void(void*)>>(std::move(deleter));
    storage = std::make_shared<StorageImpl>(data, nbytes, &release_with_deleter, ctx.get());
    ctx.release();  // the storage owns it now
  } else {
    storage = std::make_shared<StorageImpl>(data, nbytes, &release_nothing, nullptr);
  }
  Tensor t(std::make_shared<TensorImpl>(std::move(storage), shape, strides, 0, o.dtype()));
  return finish(std::move(t), o);
}

Tensor from_blob(void* data, const Shape& shape, TensorOptions o) {
  return from_blob(data, shape, contiguous_strides(shape), nullptr, o);
}
Tensor from_blob(void* data, const Shape& shape, std::function<void(void*)> deleter,
                 TensorOptions o) {
  return from_blob(data, shape, contiguous_strides(shape), std::move(deleter), o);
}
Tensor from_blob(void* data, const Shape& shape, const Shape& strides, TensorOptions o) {
  return from_blob(data, shape, strides, nullptr, o);
}

}  // namespace adjoint

ADJOINT_OPS_FILE(factories)
