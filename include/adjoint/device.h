// Device: where a tensor's storage lives and whose kernels compute on it (docs/devices.md).
// `cpu` holds bytes; `meta` holds none: shapes, dtypes and strides only, so that a model too
// big for this machine can be built, run forward and backward, and measured (memory plans).
// `cuda:N` is named so that a program can say it; this build has no CUDA backend, and making a
// tensor there is an error that says so.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace adjoint {

enum class DeviceType : uint8_t { CPU, Meta, CUDA };

class Device {
 public:
  constexpr Device(DeviceType type = DeviceType::CPU, int8_t index = 0)  // NOLINT: implicit
      : type_(type), index_(index) {}
  /// "cpu", "meta", "cuda", "cuda:1"; anything else is a Value error naming the text.
  static Device parse(std::string_view text);

  constexpr DeviceType type() const { return type_; }
  constexpr int index() const { return index_; }
  constexpr bool is_cpu() const { return type_ == DeviceType::CPU; }
  constexpr bool is_meta() const { return type_ == DeviceType::Meta; }
  constexpr bool is_cuda() const { return type_ == DeviceType::CUDA; }
  /// "cpu", "meta", "cuda:0".
  std::string str() const;

  friend constexpr bool operator==(Device a, Device b) {
    return a.type_ == b.type_ && a.index_ == b.index_;
  }

 private:
  DeviceType type_;
  int8_t index_;
};

inline constexpr Device kCPU{DeviceType::CPU};
inline constexpr Device kMeta{DeviceType::Meta};

std::ostream& operator<<(std::ostream& os, Device device);

/// The device factories use when they are given none (PyTorch's `with torch.device(...)`):
/// cpu unless a DeviceGuard says otherwise on this thread.
Device default_device();

/// Makes `device` the default of this thread's factories while it lives: a module built under
/// `DeviceGuard g(kMeta)` has meta parameters and allocates nothing. Guards nest.
class DeviceGuard {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  Device previous_;
};

}  // namespace adjoint
