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
  /// Autocast (src/dispatch/autocast.h): 0 is off, else 1 + the low DType's enumerator. Read
  /// only by ops that have an autocast policy.
  uint8_t autocast = 0;
  /// Anomaly mode (src/autograd/anomaly.h): 0 is off, else its AnomalyBits. Read where a
  /// node is recorded, beside grad_enabled.
  uint8_t anomaly = 0;
  /// The optional layers of the dispatch stack that are on, one bit per Layer (Note [The
  /// dispatch stack] in src/dispatch/layer.h); zero is the eager path, tested once per op.
  uint8_t layers = 0;
};

// constinit: constant-initialised, so every access is a plain thread-local load, with no
// call to an initialisation wrapper (GCC's UBSan misread that wrapper's result as a null
// pointer in some inlined callers).
extern constinit thread_local ModeState tls_mode;

/// The layers of the dispatch stack, top to bottom (Note [The dispatch stack] in
/// src/dispatch/layer.h).
enum class Layer : uint8_t { Autocast, Trace, Observe, Autograd, OpCache, Batching, Kernel };

constexpr uint8_t layer_bit(Layer l) { return static_cast<uint8_t>(1u << static_cast<int>(l)); }

/// Turns an optional layer on or off for this thread: the guards of autocast, observers,
/// checkpointed regions and vmap call it as their state changes.
inline void set_layer_active(Layer l, bool on) {
  tls_mode.layers = on ? static_cast<uint8_t>(tls_mode.layers | layer_bit(l))
                       : static_cast<uint8_t>(tls_mode.layers & ~layer_bit(l));
}

/// Autocast's state (ModeState::autocast) with its layer.
inline void set_autocast_state(uint8_t state) {
  tls_mode.autocast = state;
  set_layer_active(Layer::Autocast, state != 0);
}

/// The number of open vmap levels (ModeState::vmap_depth) with the batching layer.
inline void set_vmap_depth(int depth) {
  tls_mode.vmap_depth = depth;
  set_layer_active(Layer::Batching, depth != 0);
}

}  // namespace adjoint
