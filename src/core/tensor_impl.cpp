// TensorImpl and the Tensor handle's metadata and element access (no ops, no autograd).
#include "adjoint/tensor_impl.h"

#include <cstring>

#include "adjoint/detail/pool.h"
#include "adjoint/error.h"
#include "core/dispatch.h"

namespace adjoint {

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
  int64_t stride = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  numel = shape.numel();
}

void TensorImpl::refresh() {
  numel = shape.numel();
  contiguous = true;
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
const TensorImpl& checked(const Tensor& t, const char* what) {
  ADJOINT_CHECK(t.defined(), Value, what, "called on an undefined tensor");
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
    return static_cast<T>(static_cast<S*>(t.storage->data())[t.offset + offset]);
  });
}
}  // namespace

template <class T>
T Tensor::item() const {
  const TensorImpl& t = checked(*this, "item");
  ADJOINT_CHECK(t.numel == 1, Value, "item", "a tensor with ", t.numel,
                " elements cannot be converted to a scalar (shape ", t.shape, ")");
  return read_element<T>(t, 0);
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  const TensorImpl& t = checked(*this, "to_vector");
  std::vector<T> out(t.numel);
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
ADJOINT_INSTANTIATE(int64_t)
ADJOINT_INSTANTIATE(float)
ADJOINT_INSTANTIATE(double)
#undef ADJOINT_INSTANTIATE

std::string describe(const Tensor& t) {
  if (!t.defined()) return "undefined tensor";
  return detail::str(t.shape(), " (", t.dtype(), ")");
}

}  // namespace adjoint
