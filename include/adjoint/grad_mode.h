// Thread-local switches: whether ops record a graph (grad mode), inference mode, and whether
// forward-mode tangents propagate. RAII guards restore the previous state.
#pragma once

#include <cstdint>

namespace adjoint {

bool is_grad_enabled();
void set_grad_enabled(bool enabled);
bool is_inference_mode();
/// Forward mode is on while at least one DualLevel guard is alive (see autograd.h).
bool is_forward_grad_enabled();

/// Ops run inside record no graph.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/// Re-enables recording inside a NoGradGuard.
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(is_grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

/// Tangents do not propagate while alive; recording for reverse mode is unaffected (the two
/// are separate switches: NoGradGuard leaves forward mode on).
class NoForwardGradGuard {
 public:
  NoForwardGradGuard();
  ~NoForwardGradGuard();
  NoForwardGradGuard(const NoForwardGradGuard&) = delete;
  NoForwardGradGuard& operator=(const NoForwardGradGuard&) = delete;

 private:
  uint32_t prev_;
};

/// No graph, no version bookkeeping for autograd; tensors made inside are "inference tensors"
/// and cannot later be saved for backward.
class InferenceMode {
 public:
  InferenceMode();
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;

 private:
  bool prev_grad_;
  bool prev_inference_;
};

}  // namespace adjoint
