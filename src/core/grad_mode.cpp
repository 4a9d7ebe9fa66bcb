// Thread-local grad, inference and forward-mode switches.
#include "adjoint/grad_mode.h"

#include "core/made_watcher.h"
#include "core/mode_state.h"
#include "core/op_tracer.h"

namespace adjoint {

constinit thread_local ModeState tls_mode;
constinit thread_local detail::OpTracer* detail::tls_op_tracer = nullptr;
constinit thread_local detail::MadeWatcher* detail::tls_made_watcher = nullptr;

bool is_grad_enabled() { return tls_mode.grad_enabled; }
void set_grad_enabled(bool enabled) { tls_mode.grad_enabled = enabled; }
bool is_inference_mode() { return tls_mode.inference; }
bool is_forward_grad_enabled() { return tls_mode.dual_visible != 0; }

NoForwardGradGuard::NoForwardGradGuard() : prev_(tls_mode.dual_visible) {
  tls_mode.dual_visible = 0;
}
NoForwardGradGuard::~NoForwardGradGuard() { tls_mode.dual_visible = prev_; }

InferenceMode::InferenceMode()
    : prev_grad_(tls_mode.grad_enabled), prev_inference_(tls_mode.inference) {
  tls_mode.grad_enabled = false;
  tls_mode.inference = true;
}
InferenceMode::~InferenceMode() {
  tls_mode.grad_enabled = prev_grad_;
  tls_mode.inference = prev_inference_;
}

}  // namespace adjoint
