// ScopedCallTag and ScopedStepPhase: see Note [Tagging a differentiable call] and Note
// [Collectives know their step] in call_check.cpp. Thread-locals set and read within one call
// on one thread (the caller and the ProcessGroup methods it calls), not state that outlives
// the call.
#include "distributed/call_tag.h"

namespace adjoint::dist::detail {
namespace {
thread_local CallTag tls_tag = kPlainCall;
thread_local StepPhase tls_phase = StepPhase::Other;
}  // namespace

ScopedCallTag::ScopedCallTag(CallTag tag) : previous_(tls_tag) { tls_tag = tag; }
ScopedCallTag::~ScopedCallTag() { tls_tag = previous_; }

CallTag current_call_tag() { return tls_tag; }

ScopedStepPhase::ScopedStepPhase(StepPhase phase) : previous_(tls_phase) { tls_phase = phase; }
ScopedStepPhase::~ScopedStepPhase() { tls_phase = previous_; }

StepPhase current_step_phase() { return tls_phase; }

}  // namespace adjoint::dist::detail
