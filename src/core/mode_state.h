// The thread-local mode flags behind grad_mode.h, visible to the library's hot paths so that
// checking them is a load, not a call.
#pragma once

#include <cstdint>

namespace adjoint {

/// Dual levels nest at most this deep (each transform such as jvp or jacfwd opens one).
constexpr int kMaxDualLevels = 32;

struct ModeState {
  bool grad_enabled = true;
  bool inference = false;
  /// Dual levels whose tangents propagate: dual_level_ids[0 .. dual_levels). A JVP rule of
  /// level i runs with only the levels below i visible (see src/autograd/forward_ad.h).
  int dual_levels = 0;
  /// Dual levels open, visible or not (DualLevel guards alive).
  int dual_levels_open = 0;
  uint64_t dual_level_ids[kMaxDualLevels] = {};
};

extern thread_local ModeState tls_mode;

}  // namespace adjoint
