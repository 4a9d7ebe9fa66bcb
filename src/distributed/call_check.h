// The cross-rank check before a collective: each rank's CallDescriptor, and the Error that
// every rank raises alike when they disagree (Note [Agreeing on a call]).
#pragma once

#include <vector>

#include "adjoint/distributed/comm_backend.h"

namespace adjoint::dist::detail {

/// "dist.all_reduce", ...: the op name errors carry.
std::string op_name(CollectiveKind kind);

/// `step` is the group's (ProcessGroup::step); the phase comes from ScopedStepPhase.
CallDescriptor describe_call(CollectiveKind kind, ReduceOp op, int root, const Tensor& t,
                             bool valid, int64_t step);

/// Throws unless every rank made the same, valid call. `all[r]` is rank r's descriptor. On
/// the rank that refused the call its own error is rethrown; the others name that rank.
void check_agreement(const CommRequest& request, const std::vector<CallDescriptor>& all, int rank);

}  // namespace adjoint::dist::detail
