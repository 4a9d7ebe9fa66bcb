// Factories: empty, zeros, ones, full, arange, linspace, eye, and tensors from C++ data (the
// random draws are in random.cpp), as op structs with no inputs that pass the dispatch stack
// (Note [Factories in the stack]). Factory outputs are leaves; options.requires_grad marks them.
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
#include "ops/no_derivative.h"

namespace adjoint {
namespace {
using detail::OpScope;

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

// Note [Factories in the stack]
// A factory is an op struct with no inputs, applied through the dispatch stack as a random draw
// is (Note [Random draws in the stack] in random.cpp), so that each layer handles it in its own
// file and nothing here asks which transform is open:
// - Trace: instead of recording a node, the layer marks the result a constant of the graph,
//   with the recipe the struct gives (`constant_recipe()`, none for values from C++ data), from
//   which compile's dynamic sizes make it again at other sizes.
// - Observe: profiles, memory timelines and FLOP counts see each factory.
// - Batching: a factory has no batched input, so under vmap it makes one value for all examples,
//   as eager code does; the ops that combine it with batched values broadcast it.
// - Autograd: nothing to do (`differentiable = false`); options.requires_grad makes the result
//   a leaf.
// - Kernel: on meta, fill and arange write nothing; the result has its shape and dtype.
// The public functions check their arguments before apply, so a bad argument is the same named
// error whichever layers are on.
struct Factory : detail::NoDerivative<0> {
  static constexpr bool differentiable = false;
  // Never a node of a graph (the Trace layer keeps a constant), so never in a file either.
  static constexpr bool exportable = false;
};

// The options a factory was called with, the default device resolved when it is called.
struct Made {
  DType dtype = kDefaultFloat;
  Device device = kCPU;
  bool requires_grad = false;
  Made() = default;
  explicit Made(const TensorOptions& o)
      : dtype(o.dtype()), device(o.device()), requires_grad(o.requires_grad()) {}
  TensorOptions options() const { return TensorOptions(dtype).requires_grad(requires_grad); }
  Tensor empty(const Shape& shape) const { return make_empty(shape, dtype, device); }
  Tensor leaf(Tensor t) const {
    if (requires_grad) t.requires_grad_(true);
    return t;
  }
};

enum class FillKind { Full, Zeros, Ones, ScalarTensor };

// full, zeros, ones and scalar_tensor: one op under each public name, for errors and profiles.
template <FillKind K>
struct Fill : Factory {
  static constexpr const char* name = K == FillKind::Full    ? "full"
                                      : K == FillKind::Zeros ? "zeros"
                                      : K == FillKind::Ones  ? "ones"
                                                             : "scalar_tensor";
  Shape shape;
  Scalar value;
  Made made;
  Tensor forward() const {
    Tensor t = made.empty(shape);
    kernels::fill(t, value);  // a value the dtype cannot hold is an error naming this op
    return made.leaf(std::move(t));
  }
  detail::ExternalExport constant_recipe() const {
    return full_recipe(shape, value, made.options());
  }
};

struct Empty : Factory {
  static constexpr const char* name = "empty";
  Shape shape;
  Made made;
  Tensor forward() const { return made.leaf(made.empty(shape)); }
  detail::ExternalExport constant_recipe() const { return {}; }  // its values are not known
};

struct Arange : Factory {
  static constexpr const char* name = "arange";
  double start = 0, end = 0, step = 0;
  int64_t count = 0;  // the public function's check of the range computed it
  Made made;
  Tensor forward() const {
    Tensor t = made.empty({count});
    kernels::arange(t, start, step);
    return made.leaf(std::move(t));
  }
  detail::ExternalExport constant_recipe() const {
    return recipe(Recipe::Arange, made.options(), start, end, step);
  }
};

struct Linspace : Factory {
  static constexpr const char* name = "linspace";
  double start = 0, end = 0;
  int64_t steps = 0;
  Made made;
  Tensor forward() const {
    Tensor t = made.empty({steps});
    const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0;
    kernels::arange(t, start, step);
    if (steps > 1) kernels::fill(make_view(t, {}, {}, steps - 1), end);  // `end` exactly, as torch
    return made.leaf(std::move(t));
  }
  detail::ExternalExport constant_recipe() const {
    return recipe(Recipe::Linspace, made.options(), start, end, steps);
  }
};

struct Eye : Factory {
  static constexpr const char* name = "eye";
  int64_t rows = 0, cols = 0;
  Made made;
  Tensor forward() const {
    Tensor t = made.empty({rows, cols});
    kernels::fill(t, 0);
    for (int64_t i = 0; i < std::min(rows, cols); ++i)
      kernels::fill(make_view(t, {}, {}, i * cols + i), 1);
    return made.leaf(std::move(t));
  }
  detail::ExternalExport constant_recipe() const {
    return recipe(Recipe::Eye, made.options(), rows, cols);
  }
};

enum class GivenKind { Data, Blob };

// tensor(data) and from_blob: values the caller gave, already in a CPU tensor (staged from the
// C++ data, or the caller's memory wrapped), converted to the dtype and device asked for.
template <GivenKind K>
struct Given : Factory {
  static constexpr const char* name = K == GivenKind::Data ? "tensor" : "from_blob";
  Tensor values;
  Made made;
  Tensor forward() const {
    Tensor t = values;
    if (t.dtype() != made.dtype) t = kernels::cast(t, made.dtype);
    if (t.device() != made.device) t = kernels::to_device(t, made.device);
    return made.leaf(std::move(t));
  }
  detail::ExternalExport constant_recipe() const { return {}; }  // values from C++ alone
};
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

Tensor empty(const Shape& shape, TensorOptions o) { return apply(Empty{{}, shape, Made(o)}); }

Tensor full(const Shape& shape, Scalar value, TensorOptions o) {
  return apply(Fill<FillKind::Full>{{}, shape, value, Made(o)});
}

Tensor zeros(const Shape& shape, TensorOptions o) {
  return apply(Fill<FillKind::Zeros>{{}, shape, 0, Made(o)});
}

Tensor ones(const Shape& shape, TensorOptions o) {
  return apply(Fill<FillKind::Ones>{{}, shape, 1, Made(o)});
}
Tensor scalar_tensor(Scalar value, TensorOptions o) {
  return apply(Fill<FillKind::ScalarTensor>{{}, Shape{}, value, Made(o)});
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
  return apply(Arange{{}, start, end, step, static_cast<int64_t>(n), Made(o)});
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions o) {
  OpScope scope("linspace");
  ADJOINT_CHECK(steps >= 0, Value, "linspace", "number of steps must be non-negative, got ", steps);
  ADJOINT_CHECK(is_floating(o.dtype()), DType, "linspace", "expected a floating dtype, got ",
                o.dtype());
  return apply(Linspace{{}, start, end, steps, Made(o)});
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions o) {
  OpScope scope("eye");
  int64_t cols = m.value_or(n);
  ADJOINT_CHECK(n >= 0 && cols >= 0, Value, "eye", "sizes must be non-negative, got ", n, " x ",
                cols);
  return apply(Eye{{}, n, cols, Made(o)});
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
  return apply(Given<GivenKind::Data>{{}, std::move(src), Made(o)});
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
  // The memory is where the caller put it: a default device (a DeviceGuard) does not move it,
  // as libtorch's from_blob stays on the CPU unless told otherwise.
  if (!o.has_device()) o = o.device(kCPU);
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
  return apply(Given<GivenKind::Blob>{{}, std::move(t), Made(o)});
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
