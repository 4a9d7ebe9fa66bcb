// TensorImpl and the Tensor handle's metadata and element access (no ops, no autograd).
#include "adjoint/tensor_impl.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>

#include "adjoint/detail/pool.h"
#include "adjoint/error.h"
#include "core/dispatch.h"
#include "core/op_scope.h"
#include "core/op_tracer.h"
#include "core/scalar_convert.h"
#include "core/tensor_factory.h"

namespace adjoint {

namespace detail {

// Note [Tensor size limits]
// Every tensor's shape is checked once, where its TensorImpl is made (make_empty for fresh
// memory, make_view for views, reshape_fresh and set_data through refresh): no negative
// size, at most 2^63 - 1 elements and at most 2^63 - 1 bytes, and the product of the nonzero
// sizes (the largest contiguous stride) fits int64 too. So numel(), nbytes(), strides and
// the allocator's request can never overflow, whichever op made the shape (a factory,
// expand, view, a broadcast of two expanded tensors, ...). The fast path is one loop and one
// branch; the error names the current op (see Note [Current op]).
namespace {
// The error names the current op, else `fallback` (item, to_vector, data).
void check_has_data_named(const TensorImpl& t, const char* fallback) {
  if (!t.storage->device().is_meta()) return;
  throw Error(ErrorKind::Device, current_op(fallback),
              str("a tensor on the meta device has no data (shape ", t.shape, ", ", t.dtype,
                  "): its values cannot be read or written; move the computation to a device "
                  "with memory (to_empty(kCPU), or build it there)"));
}
}  // namespace

void check_has_data(const TensorImpl& t) { check_has_data_named(t, "data"); }

namespace {
constexpr int64_t kMaxInt64 = INT64_MAX;

[[noreturn]] void throw_bad_size(const Shape& shape, DType dtype, const char* fallback) {
  const char* op = current_op(fallback);
  for (int64_t d : shape)
    ADJOINT_CHECK(d >= 0, Value, op, "negative dimension ", d, " in shape ", shape, " (", dtype,
                  ")");
  int64_t span = 1;
  bool overflow = false, zero = false;
  for (int64_t d : shape) {
    overflow |= __builtin_mul_overflow(span, std::max<int64_t>(d, 1), &span);
    zero |= d == 0;
  }
  ADJOINT_CHECK(!overflow || zero, Value, op, "shape ", shape, " (", dtype,
                ") is too large: it has more than 2^63 - 1 elements");
  ADJOINT_CHECK(!overflow, Value, op, "shape ", shape, " (", dtype,
                ") is too large: the product of its nonzero sizes exceeds 2^63 - 1, so its "
                "strides would overflow");
  const auto item = static_cast<int64_t>(itemsize(dtype));
  throw Error(ErrorKind::Value, op,
              str("shape ", shape, " (", dtype, ") is too large: ", span, " elements of ", item,
                  " bytes are more than 2^63 - 1 bytes"));
}
}  // namespace

int64_t checked_numel(const Shape& shape, DType dtype, const char* fallback) {
  int64_t span = 1;  // the product of the sizes with 0 counted as 1
  bool bad = false, zero = false;
  for (int64_t d : shape) {
    bad |= d < 0;
    zero |= d == 0;
    bad |= __builtin_mul_overflow(span, d > 0 ? d : 1, &span);
  }
  const int64_t numel = zero ? 0 : span;
  // Bytes only need counting past 2^60 elements (an item is at most 8 bytes).
  if (bad || numel > (kMaxInt64 >> 3)) [[unlikely]] {
    if (bad || numel > kMaxInt64 / static_cast<int64_t>(itemsize(dtype)))
      throw_bad_size(shape, dtype, fallback);
  }
  return numel;
}

}  // namespace detail

TensorImpl::TensorImpl(std::shared_ptr<StorageImpl> s, Shape shp, Shape str, int64_t off, DType dt)
    : storage(std::move(s)),
      shape(std::move(shp)),
      strides(std::move(str)),
      offset(off),
      dtype(dt) {
  refresh();
}

TensorImpl::TensorImpl(std::shared_ptr<StorageImpl> s, const Shape& shp, DType dt)
    : storage(std::move(s)), shape(shp), strides(shp.size()), dtype(dt) {
  // Every op output is made here, so the strides and the checked element count come from one
  // pass; checked_numel runs only to report a bad shape (Note [Tensor size limits]).
  int64_t span = 1;  // the product of the sizes with 0 counted as 1: the next stride
  bool bad = false, zero = false;
  for (std::size_t i = shape.size(); i-- > 0;) {
    const int64_t d = shape[i];
    strides[i] = span;
    bad |= d < 0;
    zero |= d == 0;
    bad |= __builtin_mul_overflow(span, d > 0 ? d : 1, &span);
  }
  numel = zero ? 0 : span;
  if (bad || numel > (INT64_MAX >> 3)) [[unlikely]]
    numel = detail::checked_numel(shape, dtype, "empty");
}

void TensorImpl::refresh() {
  numel = detail::checked_numel(shape, dtype, "view");
  contiguous = true;
  // An empty tensor is contiguous whatever its strides (as PyTorch's), so a view rebuilt from
  // one answers as the tensor made by a factory did (fuzz_ops: contiguous() cloned in a
  // checkpoint's recomputation but not in its first run).
  if (numel == 0) return;
  int64_t expected = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) {
      contiguous = false;
      break;
    }
    expected *= shape[i];
  }
}

namespace detail {
// AutogradMeta comes from the small-object pool: every recorded op makes one.
AutogradMeta* new_autograd_meta() {
  PoolAllocator<AutogradMeta> alloc;
  return new (alloc.allocate(1)) AutogradMeta();
}
void delete_autograd_meta(AutogradMeta* m) {
  m->~AutogradMeta();
  PoolAllocator<AutogradMeta>().deallocate(m, 1);
}
}  // namespace detail

namespace {
[[noreturn, gnu::cold, gnu::noinline]] void throw_undefined(const char* what) {
  throw Error(ErrorKind::Value, what, "called on an undefined tensor");
}
// Every accessor below goes through this: one test inline, the error's code out of line, so
// that the compiler inlines it whatever else the file holds.
inline const TensorImpl& checked(const Tensor& t, const char* what) {
  if (!t.defined()) [[unlikely]]
    throw_undefined(what);
  return *t.impl();
}
}  // namespace

const Shape& Tensor::shape() const { return checked(*this, "shape").shape; }
const Shape& Tensor::strides() const { return checked(*this, "strides").strides; }
int64_t Tensor::dim() const { return static_cast<int64_t>(checked(*this, "dim").shape.size()); }
int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::numel() const { return checked(*this, "numel").numel; }
DType Tensor::dtype() const { return checked(*this, "dtype").dtype; }
int64_t Tensor::storage_offset() const { return checked(*this, "storage_offset").offset; }
bool Tensor::is_contiguous() const { return checked(*this, "is_contiguous").contiguous; }
std::size_t Tensor::nbytes() const { return numel() * itemsize(dtype()); }
uint64_t Tensor::version() const { return checked(*this, "version").storage->version(); }
bool Tensor::shares_storage(const Tensor& o) const {
  return defined() && o.defined() && impl_->storage == o.impl_->storage;
}
Device Tensor::device() const { return checked(*this, "device").storage->device(); }
void* Tensor::raw_data() const { return checked(*this, "data_ptr").data(); }

template <class T>
T* Tensor::data_ptr() const {
  const TensorImpl& t = checked(*this, "data_ptr");
  ADJOINT_CHECK(t.dtype == dtype_of_v<T>, DType, "data_ptr", "requested ", dtype_of_v<T>,
                " data from a ", t.dtype, " tensor");
  return static_cast<T*>(t.data());
}

namespace {
// Reads element `flat` (row-major over the shape) of a strided tensor, converted to T.
template <class T>
T read_element(const TensorImpl& t, int64_t flat) {
  int64_t offset = 0;
  for (std::size_t d = t.shape.size(); d-- > 0;) {
    offset += (flat % t.shape[d]) * t.strides[d];
    flat /= t.shape[d];
  }
  return dispatch_all(t.dtype, "read", [&]<class S>() {
    const auto v = static_cast<opmath_t<S>>(static_cast<S*>(t.storage->data())[t.offset + offset]);
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      return T(static_cast<float>(v));
    } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                         std::is_floating_point_v<opmath_t<S>>) {
      // As kernels::cast: NaN, inf and |v| >= 2^63 read as INT64_MIN, not an undefined cast;
      // a narrower integer wraps from there.
      return static_cast<T>(detail::fits_int64(static_cast<double>(v)) ? static_cast<int64_t>(v)
                                                                       : INT64_MIN);
    } else {
      return static_cast<T>(v);
    }
  });
}
}  // namespace

namespace {
constexpr const char* kReadsValues =
    "it reads a tensor's values into C++, and what the function does next may depend on them, "
    "which a graph cannot follow";
}  // namespace

template <class T>
T Tensor::item() const {
  const TensorImpl& t = checked(*this, "item");
  if (t.batched) detail::throw_batched_data_access(t);
  detail::check_has_data_named(t, "item");
  detail::check_traceable("item", kReadsValues);
  ADJOINT_CHECK(t.numel == 1, Value, "item", "a tensor with ", t.numel,
                " elements cannot be converted to a scalar (shape ", t.shape, ")");
  return read_element<T>(t, 0);
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  const TensorImpl& t = checked(*this, "to_vector");
  if (t.batched) detail::throw_batched_data_access(t);
  detail::check_has_data_named(t, "to_vector");
  detail::check_traceable("to_vector", kReadsValues);
  std::vector<T> out;
  // A huge expanded tensor has few elements in memory but numel of them to copy out.
  const int64_t memory = physical_memory_bytes();
  ADJOINT_CHECK(memory == 0 || t.numel <= memory / static_cast<int64_t>(sizeof(T)), OutOfMemory,
                "to_vector", "out of memory: ", t.numel, " elements of ", sizeof(T),
                " bytes for the values of a tensor of shape ", t.shape, " (", t.dtype,
                ") are more than this machine's ", memory, " bytes");
  try {
    out.resize(static_cast<std::size_t>(t.numel));
  } catch (const std::bad_alloc&) {
    throw Error(
        ErrorKind::OutOfMemory, "to_vector",
        detail::str("out of memory: cannot allocate ", t.numel, " elements of ", sizeof(T),
                    " bytes for the values of a tensor of shape ", t.shape, " (", t.dtype, ")"));
  } catch (const std::length_error&) {
    throw Error(
        ErrorKind::OutOfMemory, "to_vector",
        detail::str("cannot hold ", t.numel, " elements in a std::vector, for a tensor of shape ",
                    t.shape, " (", t.dtype, ")"));
  }
  if (t.contiguous && t.dtype == dtype_of_v<T> && !std::is_same_v<T, bool>) {
    if constexpr (!std::is_same_v<T, bool>) {
      if (t.numel) std::memcpy(out.data(), t.data(), t.numel * sizeof(T));
    }
    return out;
  }
  for (int64_t i = 0; i < t.numel; ++i) out[i] = read_element<T>(t, i);
  return out;
}

#define ADJOINT_INSTANTIATE(T)             \
  template T* Tensor::data_ptr<T>() const; \
  template T Tensor::item<T>() const;      \
  template std::vector<T> Tensor::to_vector<T>() const;
ADJOINT_INSTANTIATE(bool)
ADJOINT_INSTANTIATE(uint8_t)
ADJOINT_INSTANTIATE(int8_t)
ADJOINT_INSTANTIATE(int16_t)
ADJOINT_INSTANTIATE(int32_t)
ADJOINT_INSTANTIATE(int64_t)
ADJOINT_INSTANTIATE(float)
ADJOINT_INSTANTIATE(double)
ADJOINT_INSTANTIATE(Half)
ADJOINT_INSTANTIATE(BFloat16)
#undef ADJOINT_INSTANTIATE

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined tensor";
  const Device d = t.impl()->storage ? t.impl()->storage->device() : kCPU;
  if (!d.is_cpu()) return detail::str(t.shape(), " (", t.dtype(), ", ", d, ")");
  return detail::str(t.shape(), " (", t.dtype(), ")");
}

}  // namespace adjoint
