// The kernel table: which device's implementation a kernel call runs.
#pragma once

#include <initializer_list>
#include <span>

#include "adjoint/tensor_impl.h"
#include "backend/attention_kernels.h"
#include "backend/conv_kernels.h"
#include "backend/fused_program.h"
#include "backend/kernels.h"
#include "backend/linalg_kernels.h"
#include "backend/nn_kernels.h"
#include "backend/norm_kernels.h"
#include "backend/optim_kernels.h"
#include "backend/pool_kernels.h"

// Note [The kernel table]
// Each kernel is declared once, in a list under backend/kernel_lists/, and that list is
// included three times: in adjoint::kernels (what ops call), in adjoint::kernels::cpu (the
// CPU implementation, backend/cpu/) and in adjoint::kernels::meta (shape and dtype inference
// without data, backend/meta/). The function ops call (kernel_dispatch.cpp) reads the device
// of its tensor arguments and calls that device's implementation: one switch on a byte, bound
// at link time, so the CPU path pays a load and a compare. A device that is not built (cuda)
// has no case: its call is an error naming the device, as a storage there already is.
//
// The devices of one call must agree, with PyTorch's one exception: a 0-d CPU tensor (a
// wrapped scalar) goes with tensors of any device. Anything else is a Device error naming the
// op and both devices. Adding a device means a namespace that includes the lists, its
// definitions, and a case in ADJOINT_ON_DEVICE; nothing above the table changes.
namespace adjoint::kernels {

namespace cpu {
#include "backend/kernel_lists/attention.inc"
#include "backend/kernel_lists/conv.inc"
#include "backend/kernel_lists/core.inc"
#include "backend/kernel_lists/fused.inc"
#include "backend/kernel_lists/linalg.inc"
#include "backend/kernel_lists/nn.inc"
#include "backend/kernel_lists/norm.inc"
#include "backend/kernel_lists/optim.inc"
#include "backend/kernel_lists/pool.inc"
}  // namespace cpu

namespace meta {
#include "backend/kernel_lists/attention.inc"
#include "backend/kernel_lists/conv.inc"
#include "backend/kernel_lists/core.inc"
#include "backend/kernel_lists/fused.inc"
#include "backend/kernel_lists/linalg.inc"
#include "backend/kernel_lists/nn.inc"
#include "backend/kernel_lists/norm.inc"
#include "backend/kernel_lists/optim.inc"
#include "backend/kernel_lists/pool.inc"
}  // namespace meta

}  // namespace adjoint::kernels

namespace adjoint::detail {
/// The device of a call whose tensors' devices differ: the one device apart from 0-d CPU
/// tensors, or a Device error naming the current op and the two devices.
DeviceType resolve_devices(std::span<const Tensor* const> tensors);
inline DeviceType resolve_devices(std::initializer_list<const Tensor*> tensors) {
  return resolve_devices(std::span<const Tensor* const>(tensors.begin(), tensors.size()));
}
/// The device of a call on any number of tensors, by the same rules (a kernel whose tensors
/// come as a span: a fused program's inputs).
DeviceType device_of_all(std::span<const Tensor> tensors);
[[noreturn]] void throw_no_backend(DeviceType device);

inline Device device_of_defined(const Tensor& t) { return t.impl()->storage->device(); }
}  // namespace adjoint::detail

namespace adjoint::kernels {

/// The device a call on these tensors runs on; undefined tensors (an absent bias) do not take
/// part. The first tensor is always defined.
template <class... Rest>
DeviceType device_of(const Tensor& first, const Rest&... rest) {
  const Device d = detail::device_of_defined(first);
  if (((!rest.defined() || detail::device_of_defined(rest) == d) && ...)) [[likely]]
    return d.type();
  return detail::resolve_devices({&first, &rest...});
}

}  // namespace adjoint::kernels

/// The body of a kernel's dispatching function: `call` on the implementation of `device`.
#define ADJOINT_ON_DEVICE(device, call)            \
  switch (device) {                                \
    case ::adjoint::DeviceType::CPU:               \
      return ::adjoint::kernels::cpu::call;        \
    case ::adjoint::DeviceType::Meta:              \
      return ::adjoint::kernels::meta::call;       \
    default:                                       \
      ::adjoint::detail::throw_no_backend(device); \
  }
