// The thread-local mode flags behind grad_mode.h, visible to the library's hot paths so that
// checking them is a load, not a call.
#pragma once

namespace adjoint {

struct ModeState {
  bool grad_enabled = true;
  bool inference = false;
  int dual_levels = 0;
};

extern thread_local ModeState tls_mode;

}  // namespace adjoint
