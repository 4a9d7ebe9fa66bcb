// The thread's op observer slot behind op_observer.h.
//
// Note [Op observer]
// Memory timelines need a point after every op, FLOP counting an op's tensors, profiles a
// point before and after each. In forward, the observer chain is the Observe layer of the
// dispatch stack (Note [The dispatch stack] in src/dispatch/layer.h), on while a chain is
// installed (set_op_observer): before_forward_op as the call reaches it, forward_op_tensors
// and after_forward_op once the layers below (Autograd's node included) are done,
// forward_op_failed if anything threw. The engine tests the same pointer:
// before_backward_node, backward_node_tensors and after_backward_node around each node it
// runs, and it clears the pointer for the whole run (the ops inside a backward node are that
// node's, not forward ops). Several tools at once form a chain: each observer keeps the one it
// displaced in `next_`, and the base class's methods pass every call on, so an observer
// overrides only what it needs and calls the base version after. Users: memory timelines
// (src/memory/timeline.cpp), the checkpoint planner's FLOP counter
// (src/checkpoint/budget_profile.cpp), graph recorders (src/debug/recorder.cpp) and the profiler
// (src/debug/profiler.cpp).
#include "dispatch/op_observer.h"

namespace adjoint::detail {

constinit thread_local OpObserver* tls_op_observer = nullptr;

}  // namespace adjoint::detail
