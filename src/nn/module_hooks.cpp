// Module hooks: registration, removal by handle, and Module::call_with_hooks, which runs the
// forward pre-hooks and hooks around forward and wraps input and output in identity functions
// whose backward catches grad_output and grad_input for the backward hooks.
#include <algorithm>

#include "adjoint/autograd.h"
#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/nn/module.h"

namespace adjoint::nn {

// Note [Module hooks]
// Hooks fire around `module(x)` (Module::operator()), as PyTorch's fire around __call__ and not
// around forward(); the layers call their children that way, so a hook on blocks.2.attn fires
// inside a GPT. With no hook registered, operator() tests one pointer and calls forward.
//
// Backward hooks are built on custom functions, not on the engine, as PyTorch's
// BackwardHookFunction: while a backward hook is registered, a call passes its input through an
// identity function (ModuleInputHook) before forward and its output through another
// (ModuleOutputHook) after the forward hooks. Both return their argument as a fresh alias, no
// copy. In backward the output's identity sees grad_output first; the input's identity then
// sees grad_input, the gradient flowing into the caller's tensor from this call alone (a
// tensor hook on the caller's input would see the sum over all its uses, such as a residual
// branch), runs the hooks, and passes on what they return. When the input needs no gradient
// (token ids, the first layer's data) the hooks fire from the output's identity with
// grad_input undefined. Each call gets its own BackwardCall, so a module called twice in one
// forward fires twice in backward. Hooks are looked up when backward reaches the module: one
// removed in between does not fire.

const char* hook_kind_name(HookKind kind) {
  switch (kind) {
    case HookKind::ForwardPre:
      return "forward pre-hook";
    case HookKind::Forward:
      return "forward hook";
    case HookKind::Backward:
      return "backward hook";
  }
  return "hook";
}

namespace {

template <class List>
bool erase_id(List& list, uint64_t id) {
  auto it = std::find_if(list.begin(), list.end(), [&](const auto& e) { return e.id == id; });
  if (it == list.end()) return false;
  list.erase(it);
  return true;
}

// What a forward hook returned in place of `original` must have its shape, or the layers
// after it would fail far from the cause. (A dtype change is allowed: casting is a use.)
void check_replacement(const Tensor& replacement, const Tensor& original, const std::string& module,
                       HookKind kind, uint64_t id, const char* what) {
  const std::string op = "nn." + module;
  ADJOINT_CHECK(replacement.defined(), Value, op, hook_kind_name(kind), " ", id, " of ", module,
                " returned an undefined tensor as the new ", what,
                "; return std::nullopt to keep it");
  ADJOINT_CHECK(replacement.shape() == original.shape(), Shape, op, hook_kind_name(kind), " ", id,
                " of ", module, " returned ", describe(replacement), " as the new ", what,
                ", which must be of the same shape as ", describe(original));
}

// One call of a module with backward hooks: shared by its two identity functions.
struct BackwardCall {
  std::weak_ptr<ModuleHookLists> hooks;  // expired once the module is gone
  Module* module = nullptr;              // valid while `hooks` is
  std::string type_name;
  Shape input_shape;  // not the input itself: that would keep its storage alive
  DType input_dtype = kDefaultFloat;
  bool input_needs_grad = false;
  Tensor grad_output;

  // Runs the backward hooks registered now; returns grad_input, possibly replaced.
  Tensor fire(Tensor grad_input) {
    // Dropped first: with create_graph it holds the graph, which holds this call.
    Tensor grad_out = std::move(grad_output);
    std::shared_ptr<ModuleHookLists> live = hooks.lock();
    if (!live) return grad_input;
    const auto list = live->backward;  // a hook may remove itself
    for (const auto& e : list) {
      std::optional<Tensor> r = e.fn(*module, grad_input, grad_out);
      if (!r) continue;
      ADJOINT_CHECK(input_needs_grad, Value, "nn." + type_name, "backward hook ", e.id, " of ",
                    type_name, " returned a grad_input, but the module's input needs no gradient");
      ADJOINT_CHECK(r->defined() && r->shape() == input_shape && r->dtype() == input_dtype, Shape,
                    "nn." + type_name, "backward hook ", e.id, " of ", type_name, " returned ",
                    r->defined() ? describe(*r) : std::string("an undefined tensor"),
                    " as the new grad_input, which must be of the module input's shape and "
                    "dtype, ",
                    input_shape, " (", input_dtype, "); return std::nullopt to keep it");
      grad_input = *r;
    }
    return grad_input;
  }
};

std::shared_ptr<BackwardCall> call_of(FunctionCtx& ctx) {
  return std::any_cast<std::shared_ptr<BackwardCall>>(ctx.saved_data.at("call"));
}

// Identity on the module's input: its backward receives grad_input and runs the hooks.
struct ModuleInputHook : Function<ModuleInputHook> {
  static std::string name() { return "ModuleInputHook"; }
  static Tensor forward(FunctionCtx& ctx, const Tensor& x,
                        const std::shared_ptr<BackwardCall>& call) {
    ctx.saved_data["call"] = call;
    return x;  // a fresh alias (record_custom_function in src/autograd/function.cpp)
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    return {call_of(ctx)->fire(std::move(g[0]))};
  }
  static std::vector<Tensor> jvp(FunctionCtx&, std::vector<Tensor> t) { return t; }
};

// Identity on the module's output: its backward keeps grad_output for the input's identity,
// or runs the hooks itself when there is no input gradient to wait for.
struct ModuleOutputHook : Function<ModuleOutputHook> {
  static std::string name() { return "ModuleOutputHook"; }
  static Tensor forward(FunctionCtx& ctx, const Tensor& y,
                        const std::shared_ptr<BackwardCall>& call) {
    ctx.saved_data["call"] = call;
    return y;
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    const std::shared_ptr<BackwardCall> call = call_of(ctx);
    call->grad_output = g[0];
    if (!call->input_needs_grad) call->fire(Tensor());
    return g;
  }
  static std::vector<Tensor> jvp(FunctionCtx&, std::vector<Tensor> t) { return t; }
};

}  // namespace

void ModuleHookHandle::remove() {
  const std::string op = "nn." + (module_name_.empty() ? std::string("Module") : module_name_);
  ADJOINT_CHECK(!module_name_.empty(), Value, op,
                "remove() on an empty ModuleHookHandle: it was not returned by register_*_hook");
  std::shared_ptr<ModuleHookLists> hooks = hooks_.lock();
  if (!hooks) return;  // the module is gone, and its hooks with it
  bool found = false;
  switch (kind_) {
    case HookKind::ForwardPre:
      found = erase_id(hooks->forward_pre, id_);
      break;
    case HookKind::Forward:
      found = erase_id(hooks->forward, id_);
      break;
    case HookKind::Backward:
      found = erase_id(hooks->backward, id_);
      break;
  }
  ADJOINT_CHECK(found, Value, op, hook_kind_name(kind_), " ", id_, " of ", module_name_,
                " was already removed");
}

ModuleHookLists& Module::hooks() {
  if (!hooks_) hooks_ = std::make_shared<ModuleHookLists>();
  return *hooks_;
}

ModuleHookHandle Module::add_forward_pre_hook(ForwardPreHook hook) {
  ADJOINT_CHECK(static_cast<bool>(hook), Value, "nn." + type_name_,
                "register_forward_pre_hook got an empty function");
  ModuleHookLists& h = hooks();
  h.forward_pre.push_back({h.next_id, std::move(hook)});
  return ModuleHookHandle(hooks_, HookKind::ForwardPre, h.next_id++, type_name_);
}

ModuleHookHandle Module::add_forward_hook(ForwardHook hook) {
  ADJOINT_CHECK(static_cast<bool>(hook), Value, "nn." + type_name_,
                "register_forward_hook got an empty function");
  ModuleHookLists& h = hooks();
  h.forward.push_back({h.next_id, std::move(hook)});
  return ModuleHookHandle(hooks_, HookKind::Forward, h.next_id++, type_name_);
}

ModuleHookHandle Module::add_backward_hook(BackwardHook hook) {
  ADJOINT_CHECK(static_cast<bool>(hook), Value, "nn." + type_name_,
                "register_full_backward_hook got an empty function");
  ModuleHookLists& h = hooks();
  h.backward.push_back({h.next_id, std::move(hook)});
  return ModuleHookHandle(hooks_, HookKind::Backward, h.next_id++, type_name_);
}

Tensor Module::call_with_hooks(const Tensor& input) {
  // Copies: a hook may register or remove hooks (itself included) while the lists are walked.
  const std::shared_ptr<ModuleHookLists> hooks = hooks_;
  Tensor x = input;
  for (const auto& e : std::vector(hooks->forward_pre)) {
    if (std::optional<Tensor> r = e.fn(*this, x)) {
      check_replacement(*r, x, type_name_, HookKind::ForwardPre, e.id, "input");
      x = *r;
    }
  }
  std::shared_ptr<BackwardCall> call;
  Tensor forward_input = x;
  if (!hooks->backward.empty() && is_grad_enabled()) {
    call = std::make_shared<BackwardCall>();
    call->hooks = hooks;
    call->module = this;
    call->type_name = type_name_;
    call->input_shape = x.shape();
    call->input_dtype = x.dtype();
    call->input_needs_grad = x.requires_grad();
    if (call->input_needs_grad) forward_input = ModuleInputHook::apply(x, call);
  }
  Tensor y = forward(forward_input);
  for (const auto& e : std::vector(hooks->forward)) {
    if (std::optional<Tensor> r = e.fn(*this, x, y)) {
      check_replacement(*r, y, type_name_, HookKind::Forward, e.id, "output");
      y = *r;
    }
  }
  if (call && y.requires_grad()) y = ModuleOutputHook::apply(y, call);
  return y;
}

}  // namespace adjoint::nn
