// nn::Module: the base of every layer. It owns named parameters (leaves that require grad),
// named buffers (state that is not trained, such as a causal mask) and named child modules,
// all in registration order, and gives them back with dotted names ("blocks.2.attn.qkv.weight").
// It also carries the train/eval switch and the in-place dtype conversion. Layers are in the
// other headers of this folder.
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "adjoint/dtype.h"
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

  /// The single-tensor forward pass. Modules with one input override it (that is what
  /// Sequential chains); the base version throws a NotImplemented error naming the module.
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

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

  // ---- traversal (registration order, depth first; a tensor or module reachable along two
  // paths is listed once, under its first name) ----

  std::vector<Tensor> parameters(bool recurse = true) const;
  /// (dotted name, parameter) pairs, e.g. ("blocks.0.ln1.weight", w).
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
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

 private:
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
  bool training_ = true;
  std::vector<Entry> parameters_;
  std::vector<Entry> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace adjoint::nn
