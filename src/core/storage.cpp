// StorageImpl: allocator-backed or borrowed bytes.
#include "adjoint/storage.h"

#include "adjoint/allocator.h"
#include "adjoint/error.h"
#include "core/made_watcher.h"

namespace adjoint {

StorageImpl::StorageImpl(std::size_t nbytes) : data_(detail::allocate(nbytes)), nbytes_(nbytes) {
  detail::note_storage_made(this);
}

StorageImpl::StorageImpl(std::size_t nbytes, Device device)
    : data_(nullptr), nbytes_(nbytes), device_(device) {
  if (device.is_cpu()) {
    data_ = detail::allocate(nbytes);
  } else if (device.is_meta()) {
    detail::count_meta_allocation(nbytes);
  } else {
    throw Error(ErrorKind::Device, "storage",
                detail::str("this build of adjoint has no ", device,
                            " backend (built: cpu, meta); docs/devices.md says what one adds"));
  }
  detail::note_storage_made(this);
}

StorageImpl::StorageImpl(void* data, std::size_t nbytes, void (*release)(void*, void*), void* ctx)
    : data_(data), nbytes_(nbytes), release_(release), release_ctx_(ctx) {
  detail::note_storage_made(this);
}

StorageImpl::~StorageImpl() {
  if (release_) {
    release_(release_ctx_, data_);
  } else if (device_.is_meta()) {
    detail::count_meta_deallocation(nbytes_);
  } else {
    detail::deallocate(data_, nbytes_);
  }
}

}  // namespace adjoint
