// Storage: the bytes behind one or more tensors (views share it), with the version counter
// that in-place ops bump and saved tensors check. See Note [Saved tensor versions] in
// src/autograd/saved_tensor.cpp. Memory comes from the caching allocator (allocator.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "adjoint/device.h"

namespace adjoint {

class StorageImpl {
 public:
  /// Takes `nbytes` from the caching allocator.
  explicit StorageImpl(std::size_t nbytes);
  /// `nbytes` on `device`: the CPU allocator's memory, or on meta no memory at all (data() is
  /// null and the meta device's statistics count the bytes). Other devices are not built: an
  /// error naming the device.
  StorageImpl(std::size_t nbytes, Device device);
  /// Wraps memory owned elsewhere; `release` is called with `data` when the storage dies.
  StorageImpl(void* data, std::size_t nbytes, void (*release)(void* ctx, void* data), void* ctx);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  uint64_t version() const { return version_; }
  void bump_version() { ++version_; }

 private:
  void* data_;
  std::size_t nbytes_;
  uint64_t version_ = 0;
  Device device_ = kCPU;
  void (*release_)(void*, void*) = nullptr;
  void* release_ctx_ = nullptr;
};

}  // namespace adjoint
