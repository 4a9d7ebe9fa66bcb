// Factories: empty, zeros, ones, full, arange, linspace, eye, random tensors, and tensors from
// C++ data. Factory outputs are leaves; options.requires_grad marks them.
#include <cmath>
#include <cstring>

#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "backend/kernels.h"
#include "core/tensor_factory.h"

namespace adjoint {
namespace {
Tensor finish(Tensor t, const TensorOptions& o) {
  if (o.requires_grad()) t.requires_grad_(true);
  return t;
}
Generator& gen_or_default(Generator* g) { return g ? *g : default_generator(); }
const Shape& checked_shape(const Shape& shape, const char* op) {
  for (int64_t d : shape)
    ADJOINT_CHECK(d >= 0, Value, op, "negative dimension ", d, " in shape ", shape);
  return shape;
}
}  // namespace

Tensor empty(const Shape& shape, TensorOptions o) {
  return finish(make_empty(shape, o.dtype()), o);
}

Tensor full(const Shape& shape, Scalar value, TensorOptions o) {
  Tensor t = make_empty(checked_shape(shape, "full"), o.dtype());
  kernels::fill(t, value);
  return finish(std::move(t), o);
}

Tensor zeros(const Shape& shape, TensorOptions o) {
  Tensor t = make_empty(checked_shape(shape, "zeros"), o.dtype());
  if (t.numel()) std::memset(t.raw_data(), 0, t.nbytes());
  return finish(std::move(t), o);
}

Tensor ones(const Shape& shape, TensorOptions o) {
  return full(checked_shape(shape, "ones"), 1, o);
}
Tensor scalar_tensor(Scalar value, TensorOptions o) { return full(Shape{}, value, o); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype()); }
Tensor full_like(const Tensor& t, Scalar value) { return full(t.shape(), value, t.dtype()); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype()); }

Tensor arange(int64_t end, TensorOptions o) { return arange(0, static_cast<double>(end), 1, o); }

Tensor arange(double start, double end, double step, TensorOptions o) {
  ADJOINT_CHECK(step != 0, Value, "arange", "step must be nonzero");
  ADJOINT_CHECK(std::isfinite(start) && std::isfinite(end), Value, "arange",
                "start and end must be finite, got ", start, " and ", end);
  double n = std::ceil((end - start) / step);
  ADJOINT_CHECK(n >= 0, Value, "arange", "the range [", start, ", ", end, ") with step ", step,
                " goes the wrong way");
  Tensor t = make_empty({static_cast<int64_t>(n)}, o.dtype());
  kernels::arange(t, start, step);
  return finish(std::move(t), o);
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions o) {
  ADJOINT_CHECK(steps >= 0, Value, "linspace", "number of steps must be non-negative, got ", steps);
  ADJOINT_CHECK(is_floating(o.dtype()), DType, "linspace", "expected a floating dtype, got ",
                o.dtype());
  Tensor t = make_empty({steps}, o.dtype());
  double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0;
  kernels::arange(t, start, step);
  if (steps > 1) {  // hit `end` exactly, as torch.linspace does
    if (o.dtype() == DType::Float32)
      t.data_ptr<float>()[steps - 1] = static_cast<float>(end);
    else
      t.data_ptr<double>()[steps - 1] = end;
  }
  return finish(std::move(t), o);
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions o) {
  int64_t cols = m.value_or(n);
  ADJOINT_CHECK(n >= 0 && cols >= 0, Value, "eye", "sizes must be non-negative, got ", n, " x ",
                cols);
  Tensor t = zeros({n, cols}, o.dtype());
  for (int64_t i = 0; i < std::min(n, cols); ++i) {
    Tensor d = make_view(t, {}, {}, i * cols + i);
    kernels::fill(d, 1);
  }
  return finish(std::move(t), o);
}

Tensor rand(const Shape& shape, TensorOptions o, Generator* gen) {
  Tensor t = make_empty(checked_shape(shape, "rand"), o.dtype());
  kernels::uniform(t, 0, 1, gen_or_default(gen));
  return finish(std::move(t), o);
}

Tensor randn(const Shape& shape, TensorOptions o, Generator* gen) {
  Tensor t = make_empty(checked_shape(shape, "randn"), o.dtype());
  kernels::normal(t, 0, 1, gen_or_default(gen));
  return finish(std::move(t), o);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* gen) {
  ADJOINT_CHECK(low < high, Value, "randint", "expected low < high, got [", low, ", ", high, ")");
  Tensor t = make_empty(checked_shape(shape, "randint"), DType::Int64);
  kernels::randint(t, low, high, gen_or_default(gen));
  return t;
}

template <class T>
Tensor tensor(const std::vector<T>& data, std::optional<Shape> shape, TensorOptions o) {
  Shape s = shape.value_or(Shape{static_cast<int64_t>(data.size())});
  for (int64_t d : s) ADJOINT_CHECK(d >= 0, Value, "tensor", "negative dimension in shape ", s);
  ADJOINT_CHECK(s.numel() == static_cast<int64_t>(data.size()), Shape, "tensor", "shape ", s,
                " needs ", s.numel(), " elements but ", data.size(), " were given");
  Tensor src = make_empty(s, dtype_of_v<T>);
  if (!data.empty()) {
    if constexpr (std::is_same_v<T, bool>) {
      bool* p = src.data_ptr<bool>();
      for (std::size_t i = 0; i < data.size(); ++i) p[i] = data[i];
    } else {
      std::memcpy(src.raw_data(), data.data(), data.size() * sizeof(T));
    }
  }
  Tensor t = src;
  if (o.dtype() != dtype_of_v<T>) t = kernels::cast(src, o.dtype());
  return finish(std::move(t), o);
}
template Tensor tensor<bool>(const std::vector<bool>&, std::optional<Shape>, TensorOptions);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, std::optional<Shape>, TensorOptions);
template Tensor tensor<float>(const std::vector<float>&, std::optional<Shape>, TensorOptions);
template Tensor tensor<double>(const std::vector<double>&, std::optional<Shape>, TensorOptions);

Tensor tensor(std::initializer_list<double> data, TensorOptions o) {
  return tensor(std::vector<double>(data), std::nullopt, o);
}
Tensor tensor(std::initializer_list<double> data, const Shape& shape, TensorOptions o) {
  return tensor(std::vector<double>(data), shape, o);
}

}  // namespace adjoint
