// The autograd tag a differentiable collective puts on its forward call, so that ranks that
// disagree on recording it for backward fail at once (Note [Tagging a differentiable call]).
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

}  // namespace adjoint::dist::detail
