// Device names and the thread's default device for factories.
#include "adjoint/device.h"

#include <charconv>

#include "adjoint/error.h"

namespace adjoint {
namespace {
thread_local Device tls_default_device = kCPU;
}  // namespace

Device Device::parse(std::string_view text) {
  if (text == "cpu") return kCPU;
  if (text == "meta") return kMeta;
  if (text.starts_with("cuda")) {
    std::string_view rest = text.substr(4);
    if (rest.empty()) return Device(DeviceType::CUDA, 0);
    int index = -1;
    if (rest.front() == ':') {
      const char* end = rest.data() + rest.size();
      auto [p, ec] = std::from_chars(rest.data() + 1, end, index);
      if (ec == std::errc() && p == end && index >= 0 && index < 128)
        return Device(DeviceType::CUDA, static_cast<int8_t>(index));
    }
  }
  throw Error(ErrorKind::Value, "Device",
              detail::str("unknown device \"", text, "\" (expected cpu, meta, cuda or cuda:N)"));
}

std::string Device::str() const {
  switch (type_) {
    case DeviceType::CPU:
      return "cpu";
    case DeviceType::Meta:
      return "meta";
    case DeviceType::CUDA:
      return "cuda:" + std::to_string(index_);
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, Device device) { return os << device.str(); }

Device default_device() { return tls_default_device; }

DeviceGuard::DeviceGuard(Device device) : previous_(tls_default_device) {
  tls_default_device = device;
}
DeviceGuard::~DeviceGuard() { tls_default_device = previous_; }

}  // namespace adjoint
