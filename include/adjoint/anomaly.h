// Anomaly mode: which op made this NaN, and where was it called? While a DetectAnomaly guard
// is alive on a thread, every node recorded there remembers where its forward op was called
// (the first frame of the call stack outside adjoint: file and line when the caller was built
// with -g, its function's name otherwise) and in which module (`blocks.2.attn`), and backward
// checks the gradients each node returns: a NaN or infinity is an adjoint::Error naming the
// node, its forward op, that creation site, the shapes and which input's gradient went bad.
// The engine's other errors (backward through freed saved tensors, a saved tensor modified in
// place) name the creation site too. How to use it: docs/debugging.md.
#pragma once

#include <string>

namespace adjoint {

/// What a DetectAnomaly guard checks besides recording creation sites.
struct AnomalyOptions {
  /// Backward: a node returning a gradient with a NaN or infinity throws (as PyTorch's
  /// detect_anomaly with check_nan).
  bool check_nan = true;
  /// Forward: an op whose output has a NaN while none of its inputs had one throws at that op
  /// (log of a negative, 0/0). Off by default, as in PyTorch: a NaN that a later `where`
  /// masks out is harmless and would be reported.
  bool check_forward = false;
};

/// Anomaly mode on this thread while alive (or off, with enabled = false); nestable, restores
/// the previous state. Off, it costs nothing: recording reads the flag with the grad mode it
/// already reads. On, each recorded op captures a call stack (a few microseconds), so it is
/// for debugging, not training.
class DetectAnomaly {
 public:
  explicit DetectAnomaly(bool enabled = true, AnomalyOptions options = {});
  ~DetectAnomaly();
  DetectAnomaly(const DetectAnomaly&) = delete;
  DetectAnomaly& operator=(const DetectAnomaly&) = delete;

 private:
  unsigned char prev_;
};

/// Whether anomaly mode is on for this thread.
bool is_anomaly_enabled();

}  // namespace adjoint
