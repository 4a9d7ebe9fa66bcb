// StorageImpl: allocator-backed or borrowed bytes.
#include "adjoint/storage.h"

#include "adjoint/allocator.h"

namespace adjoint {

StorageImpl::StorageImpl(std::size_t nbytes) : data_(detail::allocate(nbytes)), nbytes_(nbytes) {}

StorageImpl::StorageImpl(void* data, std::size_t nbytes, void (*release)(void*, void*), void* ctx)
    : data_(data), nbytes_(nbytes), release_(release), release_ctx_(ctx) {}

StorageImpl::~StorageImpl() {
  if (release_) {
    release_(release_ctx_, data_);
  } else {
    detail::deallocate(data_, nbytes_);
  }
}

}  // namespace adjoint
