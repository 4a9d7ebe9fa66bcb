// The thread-local slot behind op_cache.h (set by src/checkpoint while a region runs).
#include "dispatch/op_cache.h"

namespace adjoint::detail {

constinit thread_local OpCache* tls_op_cache = nullptr;

}  // namespace adjoint::detail
