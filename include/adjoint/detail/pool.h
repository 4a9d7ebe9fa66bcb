// A thread-local free-list allocator for the small objects every op creates (tensor impls,
// storages, graph nodes, the short lists of edges and gradients a node keeps). A forward pass
// allocates thousands of them and backward frees them all, which overflows malloc's per-thread
// cache; recycling them here makes each allocation a few instructions. Lists are capped per size
// class, drained at thread exit, and bypassed in sanitizer builds so AddressSanitizer still sees
// every allocation.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>

namespace adjoint::detail {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kPoolEnabled = false;
#else
inline constexpr bool kPoolEnabled = true;
#endif

inline constexpr std::size_t kPoolGranule = 16;
inline constexpr std::size_t kPoolClasses = 64;  // sizes up to 1 KiB are pooled
inline constexpr std::size_t kPoolCap = 8192;    // blocks kept per size class

void* pool_allocate(std::size_t size_class);
void pool_deallocate(void* p, std::size_t size_class);

constexpr std::size_t pool_class(std::size_t bytes) {
  return (bytes + kPoolGranule - 1) / kPoolGranule;
}

template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) {}  // NOLINT: rebinding

  T* allocate(std::size_t n) {
    const std::size_t cls = pool_class(n * sizeof(T));
    if (kPoolEnabled && cls < kPoolClasses && alignof(T) <= kPoolGranule)
      return static_cast<T*>(pool_allocate(cls));
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(alignof(T))));
  }
  void deallocate(T* p, std::size_t n) {
    const std::size_t cls = pool_class(n * sizeof(T));
    if (kPoolEnabled && cls < kPoolClasses && alignof(T) <= kPoolGranule) {
      pool_deallocate(p, cls);
      return;
    }
    ::operator delete(p, std::align_val_t(alignof(T)));
  }
  template <class U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
};

/// std::make_shared with the pool.
template <class T, class... Args>
std::shared_ptr<T> make_pooled(Args&&... args) {
  return std::allocate_shared<T>(PoolAllocator<T>{}, std::forward<Args>(args)...);
}

}  // namespace adjoint::detail
