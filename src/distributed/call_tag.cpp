// ScopedCallTag: see Note [Tagging a differentiable call] in call_check.cpp. A thread-local
// set and read within one call on one thread (the differentiable collective's forward and the
// ProcessGroup method it calls), not state that outlives the call.
#include "distributed/call_tag.h"

namespace adjoint::dist::detail {
namespace {
thread_local CallTag tls_tag = kPlainCall;
}  // namespace

ScopedCallTag::ScopedCallTag(CallTag tag) : previous_(tls_tag) { tls_tag = tag; }
ScopedCallTag::~ScopedCallTag() { tls_tag = previous_; }

CallTag current_call_tag() { return tls_tag; }

}  // namespace adjoint::dist::detail
