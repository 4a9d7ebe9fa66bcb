// Autocast's side of apply<Op> (see include/adjoint/autocast.h for the user's side). An op
// names its policy beside its forward, VJP and JVP:
//   static constexpr AutocastPolicy autocast = AutocastPolicy::Lower;
// The Autocast layer, the top of the dispatch stack (src/dispatch/layers.cpp), converts the
// op's floating inputs by that policy before the other layers see the call, with recorded
// (differentiable) casts, so the gradient of a float32 parameter flows back through the cast
// and arrives in float32. Ops without the member follow their inputs. The layer is on only
// inside an enabled Autocast guard; otherwise it costs nothing.
#pragma once

#include "adjoint/autocast.h"
#include "adjoint/tensor.h"
#include "core/mode_state.h"

namespace adjoint {

enum class AutocastPolicy : uint8_t {
  Follow,   ///< the dtypes of the inputs (binary ops promote as usual)
  Lower,    ///< float32 inputs to the low dtype (matrix products)
  Float32,  ///< float16/bfloat16 inputs to float32 (range or precision: softmax, losses, ...)
};

namespace detail {

template <class Op>
constexpr AutocastPolicy autocast_policy() {
  if constexpr (requires { Op::autocast; })
    return Op::autocast;
  else
    return AutocastPolicy::Follow;
}

/// x converted as `policy` asks under the current autocast state (tls_mode.autocast != 0).
Tensor autocast_input(const Tensor& x, AutocastPolicy policy);
/// The dtype autocast_input gives a tensor of dtype `d` (d itself while autocast is off): for
/// a public function whose checks must see what its op will see below the Autocast layer (the
/// convolutions check that input and weight share a dtype).
DType autocast_target(DType d, AutocastPolicy policy);

/// Sets the thread's autocast state for a scope (backward turns it off; a checkpointed region
/// recomputes under the state its first run had).
class AutocastStateScope {
 public:
  explicit AutocastStateScope(uint8_t state) : prev_(tls_mode.autocast) {
    set_autocast_state(state);
  }
  ~AutocastStateScope() { set_autocast_state(prev_); }
  AutocastStateScope(const AutocastStateScope&) = delete;
  AutocastStateScope& operator=(const AutocastStateScope&) = delete;

 private:
  uint8_t prev_;
};

}  // namespace detail
}  // namespace adjoint
