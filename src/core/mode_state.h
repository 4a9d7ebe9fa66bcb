// The thread-local mode flags behind grad_mode.h, visible to the library's hot paths so that
// checking them is a load, not a call.
#pragma once

#include <cstdint>

namespace adjoint {

/// Dual levels nest at most this deep (each transform such as jvp or jacfwd opens one).
constexpr int kMaxDualLevels = 32;  // one bit each in ModeState::dual_visible

struct ModeState {
  bool grad_enabled = true;
  bool inference = false;
  /// Bit i set: the dual level dual_level_ids[i] propagates tangents. A JVP rule of level i
  /// runs with only the visible levels below i (see src/autograd/forward_ad.h);
  /// NoForwardGradGuard clears them all. Zero means forward mode is off (the hot-path test).
  uint32_t dual_visible = 0;
  /// Dual levels open, visible or not (DualLevel guards alive): dual_level_ids[0 .. open).
  int dual_levels_open = 0;
  uint64_t dual_level_ids[kMaxDualLevels] = {};
  /// vmap levels open on this thread (src/vmap); zero means no op can see a batched tensor
  /// (the hot-path test in apply<Op>).
  int vmap_depth = 0;
  /// Autocast (src/autograd/autocast.h): 0 is off, else 1 + the low DType's enumerator. Read
  /// only by ops that have an autocast policy.
  uint8_t autocast = 0;
  /// Anomaly mode (src/autograd/anomaly.h): 0 is off, else its AnomalyBits. Read where a
  /// node is recorded, beside grad_enabled.
  uint8_t anomaly = 0;
};

// constinit: constant-initialised, so every access is a plain thread-local load, with no
// call to an initialisation wrapper (GCC's UBSan misread that wrapper's result as a null
// pointer in some inlined callers).
extern constinit thread_local ModeState tls_mode;

}  // namespace adjoint
