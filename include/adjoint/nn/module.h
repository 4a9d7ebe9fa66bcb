// nn::Module: the base of every layer. It owns named parameters (leaves that require grad),
// named buffers (state that is not trained, such as a causal mask) and named child modules,
// all in registration order, and gives them back with dotted names ("blocks.2.attn.qkv.weight").
// It also carries the train/eval switch and the in-place dtype conversion. Layers are in the
// other headers of this folder. Forward and backward hooks (module_hooks.h) fire when the module
// is called as module(x).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "adjoint/anomaly.h"
#include "adjoint/dtype.h"
#include "adjoint/nn/module_hooks.h"
#include "adjoint/tensor.h"

namespace adjoint::nn {

/// Base class of all modules. Modules are held as std::shared_ptr (libtorch style) and are
/// not copyable: a copy would silently share or duplicate parameters.
///
///   struct Affine : nn::Module {
///     Tensor w, b;
///     Affine() : Module("Affine") {
///       w = register_parameter("w", ones({3}));
///       b = register_parameter("b", zeros({3}));
///     }
///     Tensor forward(const Tensor& x) override { return x * w + b; }
///   };
///
/// A subclass keeps the handles that register_* returns in members, so forward never looks a
/// name up. The handles stay valid through to(dtype), which converts each tensor in place.
class Module : public std::enable_shared_from_this<Module> {
 public:
  /// `type_name` names the module in errors and listings ("Linear", "GPT").
  explicit Module(std::string type_name = "Module");
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The class-level name given at construction, e.g. "Linear".
  const std::string& type_name() const { return type_name_; }
  /// The dotted name of this module under the module it was first registered in, and so on
  /// up ("blocks.2.attn"); "" for a module registered nowhere (the model itself).
  std::string path() const;

  /// The single-tensor forward pass. Modules with one input override it (that is what
  /// Sequential chains); the base version throws a NotImplemented error naming the module.
  virtual Tensor forward(const Tensor& input);
  /// forward(input) with this module's hooks around it (Note [Module hooks] in
  /// src/nn/module_hooks.cpp). Layers call their children this way, so hooks fire anywhere
  /// in a model; with no hook registered it costs one pointer test.
  Tensor operator()(const Tensor& input) {
    if (is_anomaly_enabled()) [[unlikely]]
      return call_in_anomaly_scope(input);
    if (hooks_ == nullptr || hooks_->empty()) return forward(input);
    return call_with_hooks(input);
  }

  // ---- hooks (as PyTorch's; see module_hooks.h for what each receives) ----

  /// hook(module, input) runs before forward, in registration order; returning a tensor
  /// (std::optional<Tensor>) replaces the input, returning nothing (void or nullopt) keeps it.
  template <class F>
  ModuleHookHandle register_forward_pre_hook(F&& hook) {
    return add_forward_pre_hook(wrap_hook<ForwardPreHook, const Tensor&>(std::forward<F>(hook)));
  }
  /// hook(module, input, output) runs after forward, in registration order; returning a tensor
  /// replaces the output the next hooks and the caller see.
  template <class F>
  ModuleHookHandle register_forward_hook(F&& hook) {
    return add_forward_hook(
        wrap_hook<ForwardHook, const Tensor&, const Tensor&>(std::forward<F>(hook)));
  }
  /// hook(module, grad_input, grad_output) runs in backward when the gradient w.r.t. the
  /// module's input is ready (at once, with grad_input undefined, when the input needs no
  /// gradient); returning a tensor replaces grad_input. Calls made while a backward hook is
  /// registered are wrapped in identity functions that catch both gradients; calls made
  /// before are not.
  template <class F>
  ModuleHookHandle register_full_backward_hook(F&& hook) {
    return add_backward_hook(
        wrap_hook<BackwardHook, const Tensor&, const Tensor&>(std::forward<F>(hook)));
  }

  // ---- registration ----

  /// Adds a trainable parameter and returns its handle. The tensor must be a floating-point
  /// leaf; it is marked requires_grad(requires_grad). Names must be non-empty, contain no
  /// '.', and be unique among this module's parameters, buffers and children; otherwise an
  /// adjoint::Error (kind Value) names the module and the name.
  Tensor register_parameter(std::string name, Tensor tensor, bool requires_grad = true);
  /// Adds a buffer: state saved with the module and converted by to(), but not trained
  /// (never given requires_grad). Same naming rules as parameters.
  Tensor register_buffer(std::string name, Tensor tensor);
  /// Adds a child module and returns it with its own type, so that
  ///   fc = register_module("fc", std::make_shared<Linear>(8, 4));
  /// keeps a typed pointer. Same naming rules; registering a module inside itself (a cycle)
  /// is an error.
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "register_module needs a subclass of nn::Module");
    add_child(std::move(name), module);
    return module;
  }

  /// Puts `module` in place of the child registered as `name` (same name, same place in the
  /// order), as libtorch's replace_module and PyTorch's assignment to a registered submodule, and
  /// returns the child it replaced. Traversal, state_dict(), train() and containers' forward
  /// (Sequential) see the new child from then on; a typed member that a subclass keeps (the
  /// pointer register_module returned) still holds the old one. No child of that name is an Index
  /// error, and a module that contains this one (a cycle) a Value error, both naming the module.
  std::shared_ptr<Module> replace_module(const std::string& name, std::shared_ptr<Module> module);

  // ---- traversal (registration order, depth first; a tensor or module reachable along two
  // paths is listed once, under its first name) ----

  std::vector<Tensor> parameters(bool recurse = true) const;
  /// (dotted name, parameter) pairs, e.g. ("blocks.0.ln1.weight", w).
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  /// named_parameters() then named_buffers(), as PyTorch's state_dict(): everything a
  /// checkpoint of the module holds (batch norm's running statistics and counter included), as
  /// handles, so io::save_checkpoint(path, m.state_dict()) saves it and
  /// io::load_checkpoint(path, m.state_dict()) restores it in place.
  std::vector<std::pair<std::string, Tensor>> state_dict() const {
    std::vector<std::pair<std::string, Tensor>> out = named_parameters();
    for (auto& entry : named_buffers()) out.push_back(std::move(entry));
    return out;
  }
  /// The direct children.
  std::vector<std::shared_ptr<Module>> children() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  /// This module (named "") and every descendant, with dotted names.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();

  /// The parameter (or buffer) at a dotted path such as "blocks.1.attn.proj.bias"; throws an
  /// Index error naming the path when there is none.
  Tensor get_parameter(const std::string& dotted_name) const;
  Tensor get_buffer(const std::string& dotted_name) const;

  /// Total number of elements over parameters() (each shared parameter counted once).
  int64_t num_parameters() const;

  // ---- printing (operator<< below) ----

  /// What the printed tree shows inside this module's parentheses, PyTorch's extra_repr():
  /// "in_features=4, out_features=8, bias=true" for a Linear. Override it in a module of your
  /// own; the built-in layers' descriptions are in src/nn/module_print.cpp, and a module
  /// without one shows its own parameters' shapes ("w=[3], b=[3]").
  virtual std::string extra_repr() const;

  // ---- state ----

  /// Drops the .grad of every parameter (set_to_none, the default) or zeroes it in place.
  void zero_grad(bool set_to_none = true);
  /// Sets training mode here and in every descendant (Dropout reads it). Returns *this.
  Module& train(bool on = true);
  /// train(false).
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  /// Converts every floating-point parameter and buffer to `dtype` (which must be floating),
  /// in place: each TensorImpl gets new storage, so handles held anywhere (module members,
  /// an optimizer's list, a tied weight) see the converted tensor. Gradients are dropped.
  /// Integer and bool buffers (masks, positions) keep their dtype.
  Module& to(DType dtype);
  /// Moves every parameter and buffer to `device`, in place as to(dtype) does. From meta this
  /// is an error (no values to move): use to_empty.
  Module& to(Device device);
  /// Gives every parameter and buffer uninitialised memory of its shape and dtype on
  /// `device`, in place: how a module built on meta (DeviceGuard) is materialised, before its
  /// values are loaded (load_state_dict, io::load) or initialised again.
  Module& to_empty(Device device);

 protected:
  /// Called by replace_module after the child at `index` (registration order) became
  /// `replacement`: a container that keeps its own list of children (Sequential) updates it.
  virtual void child_replaced(std::size_t /*index*/,
                              const std::shared_ptr<Module>& /*replacement*/) {}

 private:
  // A hook written to return void only observes: wrap it into one returning nullopt.
  template <class Hook, class... Args, class F>
  static Hook wrap_hook(F&& hook) {
    if constexpr (std::is_void_v<std::invoke_result_t<F&, Module&, Args...>>) {
      return [h = std::forward<F>(hook)](Module& m, Args... args) mutable -> std::optional<Tensor> {
        h(m, args...);
        return std::nullopt;
      };
    } else {
      return Hook(std::forward<F>(hook));
    }
  }
  ModuleHookHandle add_forward_pre_hook(ForwardPreHook hook);
  ModuleHookHandle add_forward_hook(ForwardHook hook);
  ModuleHookHandle add_backward_hook(BackwardHook hook);
  ModuleHookLists& hooks();
  Tensor call_with_hooks(const Tensor& input);
  // operator() while anomaly mode is on: names this module's scope for creation sites.
  Tensor call_in_anomaly_scope(const Tensor& input);

  struct Entry {
    std::string name;
    Tensor tensor;
  };
  void check_name(const std::string& name, const char* what) const;
  void add_child(std::string name, std::shared_ptr<Module> module);
  bool contains(const Module* m) const;
  template <class Visit>
  void walk(const std::string& prefix, bool recurse, Visit&& visit) const;

  std::string type_name_;
  // The module this one was first registered in (cleared if that one dies first) and the
  // name it has there: what path() walks.
  const Module* parent_ = nullptr;
  std::string name_in_parent_;
  bool training_ = true;
  std::vector<Entry> parameters_;
  std::vector<Entry> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  // Null until a hook is registered. Owned here only: handles and backward wrappers keep
  // weak_ptrs, so the hooks die with the module.
  std::shared_ptr<ModuleHookLists> hooks_;
};

/// The module as a tree, as PyTorch prints repr(model): one line per module, children
/// indented under their parent with their names, each with its extra_repr() and the number
/// of parameters it holds (its descendants' included; none shown for a module without any):
///   Sequential(  # 49 parameters
///     (0): Linear(in_features=4, out_features=8, bias=true)  # 40 parameters
///     (1): ReLU()
///     (2): Linear(in_features=8, out_features=1, bias=true)  # 9 parameters
///   )
std::ostream& operator<<(std::ostream& os, const Module& module);

/// One row of summary(): one module, its descendants included in every number.
struct ModuleSummaryRow {
  std::string name;        ///< dotted path under the model ("" for the model itself)
  std::string type;        ///< type_name()
  int depth = 0;           ///< 0 for the model, 1 for its children, ...
  int64_t calls = 0;       ///< times forward ran (0: not called by this forward)
  Shape output_shape;      ///< of the last call
  int64_t parameters = 0;  ///< num_parameters()
  uint64_t flops = 0;      ///< forward FLOPs of its calls (the profiler's Note [FLOP counting])
  std::size_t saved_bytes = 0;  ///< bytes its calls saved for backward (saved_memory_stats())
};

/// What summary() measured: the rows in named_modules() order, and the model's totals.
struct ModelSummary {
  std::vector<ModuleSummaryRow> rows;
  int64_t total_parameters = 0;
  uint64_t total_flops = 0;
  std::size_t total_saved_bytes = 0;
  Shape input_shape;
  /// A table, one row per module (indented by depth), then the totals.
  std::string to_string() const;
};
std::ostream& operator<<(std::ostream& os, const ModelSummary& s);

/// Runs model(input) once, with gradients recorded, under a Profiler and a saved-memory
/// tracker, with forward hooks on every module, and reports per module its output shape,
/// parameters, forward FLOPs and the bytes it saved for backward (like torchinfo's summary).
/// The graph is dropped afterwards; the model is left as it was (the hooks are removed).
ModelSummary summary(Module& model, const Tensor& input);
inline ModelSummary summary(const std::shared_ptr<Module>& model, const Tensor& input) {
  return summary(*model, input);
}

}  // namespace adjoint::nn
