// The std::terminate handler that ends the whole MPI job with the uncaught error.
#pragma once

namespace adjoint::dist {
class ProcessGroup;
/// The default group, or null when none runs (no error, unlike default_group()).
ProcessGroup* default_group_or_null();
}  // namespace adjoint::dist

namespace adjoint::dist::detail {
/// Installs it once per process; later calls do nothing.
void install_terminate_handler();
}  // namespace adjoint::dist::detail
