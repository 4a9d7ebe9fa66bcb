// Module hooks, as PyTorch's register_forward_pre_hook, register_forward_hook and
// register_full_backward_hook: the hook types, the handle that removes one, and the per-module
// list they live in. Module (module.h) registers and runs them; src/nn/module_hooks.cpp holds
// the calls. Hooks fire only when a module is called as `module(x)`, not on `module.forward(x)`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint::nn {

class Module;

/// Runs before forward with the input; a returned tensor replaces the input (same shape).
using ForwardPreHook = std::function<std::optional<Tensor>(Module&, const Tensor& input)>;
/// Runs after forward with the input forward saw and the output; a returned tensor replaces
/// the output (same shape) for the later hooks and the caller.
using ForwardHook =
    std::function<std::optional<Tensor>(Module&, const Tensor& input, const Tensor& output)>;
/// Runs in backward once the gradient w.r.t. the module's input is known. grad_input is the
/// gradient of the loss w.r.t. the input the module was called with (undefined when that input
/// needs no gradient); grad_output the gradient w.r.t. the output the caller received. A
/// returned tensor replaces grad_input (same shape and dtype) for the rest of backward.
using BackwardHook = std::function<std::optional<Tensor>(Module&, const Tensor& grad_input,
                                                         const Tensor& grad_output)>;

enum class HookKind { ForwardPre, Forward, Backward };
const char* hook_kind_name(HookKind kind);  // "forward pre-hook", ...

// The hooks of one module, in registration order. Owned by the module alone (handles and the
// backward wrappers hold weak_ptrs), so it lives exactly as long as its module.
struct ModuleHookLists {
  template <class Fn>
  struct Entry {
    uint64_t id;
    Fn fn;
  };
  std::vector<Entry<ForwardPreHook>> forward_pre;
  std::vector<Entry<ForwardHook>> forward;
  std::vector<Entry<BackwardHook>> backward;
  uint64_t next_id = 0;
  bool empty() const { return forward_pre.empty() && forward.empty() && backward.empty(); }
};

/// What register_*_hook returns. remove() unregisters the hook; removing it a second time
/// (through this handle or a copy) is an adjoint::Error naming the module and the hook.
/// Removing after the module was destroyed does nothing: its hooks died with it. Dropping the
/// handle without calling remove() keeps the hook registered.
class ModuleHookHandle {
 public:
  ModuleHookHandle() = default;
  ModuleHookHandle(std::weak_ptr<ModuleHookLists> hooks, HookKind kind, uint64_t id,
                   std::string module_name)
      : hooks_(std::move(hooks)), kind_(kind), id_(id), module_name_(std::move(module_name)) {}

  void remove();
  HookKind kind() const { return kind_; }
  uint64_t id() const { return id_; }

 private:
  std::weak_ptr<ModuleHookLists> hooks_;
  HookKind kind_ = HookKind::Forward;
  uint64_t id_ = 0;
  std::string module_name_;
};

}  // namespace adjoint::nn
