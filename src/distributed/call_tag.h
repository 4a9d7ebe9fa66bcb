// The tags a collective carries beside its data's description: the autograd tag a
// differentiable collective puts on its forward call, so that ranks that disagree on recording
// it for backward fail at once (Note [Tagging a differentiable call]), and the phase of a
// training step the call belongs to (Note [Collectives know their step]).
#pragma once

#include <cstdint>

namespace adjoint::dist::detail {

enum CallTag : int64_t {
  kPlainCall = 0,    ///< a ProcessGroup method called directly
  kNotRecorded = 1,  ///< a differentiable collective whose input needs no gradient
  kRecorded = 2,     ///< a differentiable collective recorded for backward
};

/// Tags the collectives the calling thread starts while it lives (one call, in practice).
class ScopedCallTag {
 public:
  explicit ScopedCallTag(CallTag tag);
  ~ScopedCallTag();
  ScopedCallTag(const ScopedCallTag&) = delete;
  ScopedCallTag& operator=(const ScopedCallTag&) = delete;

 private:
  CallTag previous_;
};

CallTag current_call_tag();

/// Which part of a training step a collective belongs to.
enum class StepPhase : int64_t {
  Other = 0,              ///< any call outside the two below
  GradientReduction = 1,  ///< DistributedDataParallel's buckets, counts and rebuild
  ShardedUpdate = 2,      ///< ZeroOptimizer's norm, skip flags and parameter all-gather
};

/// Puts the collectives the calling thread starts while it lives into `phase`.
class ScopedStepPhase {
 public:
  explicit ScopedStepPhase(StepPhase phase);
  ~ScopedStepPhase();
  ScopedStepPhase(const ScopedStepPhase&) = delete;
  ScopedStepPhase& operator=(const ScopedStepPhase&) = delete;

 private:
  StepPhase previous_;
};

StepPhase current_step_phase();

}  // namespace adjoint::dist::detail
