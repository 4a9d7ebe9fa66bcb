// The optimizer kernels on meta: nothing to update, and no claim to round as the ops do, so
// the optimizer runs its op-by-op update there, whose shapes and memory are what a plan
// counts (docs/devices.md).
#include "backend/device_kernels.h"

namespace adjoint::kernels {

bool meta::adam_step_exact(Device) { return false; }
void meta::adam_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                     const AdamScalars&) {}

}  // namespace adjoint::kernels
