// nn::Module: registration with name checks, depth-first traversal with dotted names,
// train/eval propagation, zero_grad, and the in-place dtype conversion behind Module::to.
#include "adjoint/nn/module.h"

#include <unordered_set>
#include <utility>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "adjoint/tensor_impl.h"
#include "autograd/anomaly.h"
#include "autograd/apply.h"

namespace adjoint::nn {
namespace {

// Note [Module::to converts in place]
// As libtorch's Module::to, each parameter's data is swapped under the same handle
// (Tensor::set_data), so a subclass's member handles, an optimizer's parameter list and a
// weight tied between two modules all keep pointing at the converted tensor. The tensor stays
// a leaf with its requires_grad flag; its gradient (of the old dtype) is dropped, and its
// version restarts with the new storage, so a graph that saved the old tensor refuses to run
// backward rather than mixing dtypes.
void convert_in_place(const Tensor& t, DType dtype) {
  if (!t.defined() || t.dtype() == dtype || !t.is_floating_point()) return;
  Tensor converted;
  {
    NoGradGuard no_grad;
    converted = detail::detach_alias(t).to(dtype);
  }
  t.set_data(converted);
}

// The same tensor (handle and autograd identity) on another device; see convert_in_place.
// `empty`: uninitialised memory there instead of a copy (materialising a meta module).
void move_in_place(const Tensor& t, Device device, bool empty) {
  if (!t.defined() || t.device() == device) return;
  Tensor moved;
  {
    NoGradGuard no_grad;
    moved = empty ? t.to_empty(device) : detail::detach_alias(t).to(device);
  }
  t.set_data(moved);
}

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

}  // namespace

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}
Module::~Module() {
  // A child that outlives this module (shared with another owner) forgets it as its parent.
  for (const auto& [name, child] : children_)
    if (child->parent_ == this) child->parent_ = nullptr;
}

Tensor Module::forward(const Tensor& input) {
  ADJOINT_CHECK(false, NotImplemented, "nn." + type_name_, type_name_,
                " has no single-tensor forward; call its own methods instead (input ",
                describe(input), ")");
  return {};
}

void Module::check_name(const std::string& name, const char* what) const {
  const std::string op = "nn." + type_name_;
  ADJOINT_CHECK(!name.empty(), Value, op, "cannot register a ", what, " with an empty name in ",
                type_name_);
  ADJOINT_CHECK(name.find('.') == std::string::npos, Value, op, "cannot register ", what, " '",
                name, "' in ", type_name_,
                ": names may not contain '.', which separates the levels of dotted names");
  auto taken = [&](const auto& list) {
    for (const auto& e : list)
      if (e.first == name) return true;
    return false;
  };
  auto taken_entry = [&](const std::vector<Entry>& list) {
    for (const Entry& e : list)
      if (e.name == name) return true;
    return false;
  };
  const char* by = taken_entry(parameters_) ? "a parameter"
                   : taken_entry(buffers_)  ? "a buffer"
                   : taken(children_)       ? "a submodule"
                                            : nullptr;
  ADJOINT_CHECK(by == nullptr, Value, op, "cannot register ", what, " '", name, "' in ", type_name_,
                ": the name is already taken by ", by);
}

Tensor Module::register_parameter(std::string name, Tensor tensor, bool requires_grad) {
  check_name(name, "parameter");
  const std::string op = "nn." + type_name_;
  ADJOINT_CHECK(tensor.defined(), Value, op, "parameter '", name, "' of ", type_name_,
                " is an undefined tensor");
  ADJOINT_CHECK(tensor.is_floating_point(), DType, op, "parameter '", name, "' of ", type_name_,
                " must be floating point, got ", describe(tensor));
  ADJOINT_CHECK(
      tensor.is_leaf(), Value, op, "parameter '", name, "' of ", type_name_,
      " must be a leaf tensor (it has a grad_fn); register detail::detach_alias(t) instead");
  tensor.requires_grad_(requires_grad);
  parameters_.push_back({std::move(name), tensor});
  return tensor;
}

Tensor Module::register_buffer(std::string name, Tensor tensor) {
  check_name(name, "buffer");
  ADJOINT_CHECK(tensor.defined(), Value, "nn." + type_name_, "buffer '", name, "' of ", type_name_,
                " is an undefined tensor");
  buffers_.push_back({std::move(name), tensor});
  return tensor;
}

bool Module::contains(const Module* m) const {
  if (m == this) return true;
  for (const auto& [name, child] : children_)
    if (child->contains(m)) return true;
  return false;
}

void Module::add_child(std::string name, std::shared_ptr<Module> module) {
  check_name(name, "submodule");
  const std::string op = "nn." + type_name_;
  ADJOINT_CHECK(module != nullptr, Value, op, "submodule '", name, "' of ", type_name_, " is null");
  ADJOINT_CHECK(!module->contains(this), Value, op, "cannot register submodule '", name, "' in ",
                type_name_, ": it contains ", type_name_, " itself, which would make a cycle");
  children_.emplace_back(name, module);
  if (module->parent_ == nullptr) {  // its first parent names it (as named_modules lists it)
    module->parent_ = this;
    module->name_in_parent_ = std::move(name);
  }
}

std::shared_ptr<Module> Module::replace_module(const std::string& name,
                                               std::shared_ptr<Module> module) {
  const std::string op = "nn." + type_name_;
  std::size_t i = 0;
  while (i < children_.size() && children_[i].first != name) ++i;
  ADJOINT_CHECK(i < children_.size(), Index, op, type_name_, " has no submodule '", name,
                "' to replace");
  ADJOINT_CHECK(module != nullptr, Value, op, "replacement for submodule '", name, "' of ",
                type_name_, " is null");
  ADJOINT_CHECK(!module->contains(this), Value, op, "cannot put a module in place of submodule '",
                name, "' of ", type_name_, ": it contains ", type_name_,
                " itself, which would make a cycle");
  std::shared_ptr<Module> old = std::exchange(children_[i].second, module);
  // The old child is no longer listed here, so it must not name this module as its parent.
  if (old->parent_ == this) old->parent_ = nullptr;
  if (module->parent_ == nullptr) {
    module->parent_ = this;
    module->name_in_parent_ = name;
  }
  child_replaced(i, module);
  return old;
}

std::string Module::path() const {
  if (parent_ == nullptr) return "";
  const std::string up = parent_->path();
  return up.empty() ? name_in_parent_ : up + "." + name_in_parent_;
}

Tensor Module::call_in_anomaly_scope(const Tensor& input) {
  const detail::ModuleScope scope(path().empty() ? type_name_ : path());
  if (hooks_ == nullptr || hooks_->empty()) return forward(input);
  return call_with_hooks(input);
}

// Calls visit(dotted prefix, module) on this module, then (when recursing) on every
// descendant, depth first in registration order.
template <class Visit>
void Module::walk(const std::string& prefix, bool recurse, Visit&& visit) const {
  visit(prefix, *this);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->walk(join(prefix, name), true, visit);
}

namespace {

// Collects tensors from a walk, each TensorImpl once (a tied or shared tensor keeps the
// first name it was reached by, as PyTorch's remove_duplicate).
struct Collector {
  std::vector<std::pair<std::string, Tensor>> out;
  std::unordered_set<const TensorImpl*> seen;
  void add(const std::string& prefix, const std::string& name, const Tensor& t) {
    if (seen.insert(t.impl()).second) out.emplace_back(join(prefix, name), t);
  }
};

std::vector<Tensor> handles(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<Tensor> out;
  out.reserve(named.size());
  for (const auto& [name, t] : named) out.push_back(t);
  return out;
}

}  // namespace

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  Collector c;
  walk("", recurse, [&](const std::string& prefix, const Module& m) {
    for (const Entry& e : m.parameters_) c.add(prefix, e.name, e.tensor);
  });
  return std::move(c.out);
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  Collector c;
  walk("", recurse, [&](const std::string& prefix, const Module& m) {
    for (const Entry& e : m.buffers_) c.add(prefix, e.name, e.tensor);
  });
  return std::move(c.out);
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  return handles(named_parameters(recurse));
}

std::vector<Tensor> Module::buffers(bool recurse) const { return handles(named_buffers(recurse)); }

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  out.reserve(children_.size());
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  std::unordered_set<const Module*> seen{this};
  // shared_from_this needs an owning shared_ptr; a module on the stack lists itself unowned.
  std::shared_ptr<Module> self = weak_from_this().lock();
  if (!self) self = std::shared_ptr<Module>(this, [](Module*) {});
  out.emplace_back("", self);
  walk("", true, [&](const std::string& prefix, const Module& m) {
    for (const auto& [name, child] : m.children_)
      if (seen.insert(child.get()).second) out.emplace_back(join(prefix, name), child);
  });
  return out;
}

namespace {

Tensor find_named(const std::vector<std::pair<std::string, Tensor>>& named,
                  const std::string& dotted, const std::string& type_name, const char* what) {
  for (const auto& [name, t] : named)
    if (name == dotted) return t;
  ADJOINT_CHECK(false, Index, "nn." + type_name, type_name, " has no ", what, " named '", dotted,
                "'");
  return {};
}

}  // namespace

Tensor Module::get_parameter(const std::string& dotted_name) const {
  return find_named(named_parameters(), dotted_name, type_name_, "parameter");
}

Tensor Module::get_buffer(const std::string& dotted_name) const {
  return find_named(named_buffers(), dotted_name, type_name_, "buffer");
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::zero_grad(bool set_to_none) {
  for (const Tensor& p : parameters()) p.zero_grad(set_to_none);
}

Module& Module::train(bool on) {
  training_ = on;
  for (const auto& [name, child] : children_) child->train(on);
  return *this;
}

Module& Module::to(DType dtype) {
  ADJOINT_CHECK(is_floating(dtype), DType, "nn." + type_name_,
                "to() converts parameters and buffers to a floating dtype, got ", dtype);
  for (const Tensor& p : parameters()) convert_in_place(p, dtype);
  for (const Tensor& b : buffers()) convert_in_place(b, dtype);
  return *this;
}

Module& Module::to(Device device) {
  for (const Tensor& p : parameters()) move_in_place(p, device, false);
  for (const Tensor& b : buffers()) move_in_place(b, device, false);
  return *this;
}

Module& Module::to_empty(Device device) {
  for (const Tensor& p : parameters()) move_in_place(p, device, true);
  for (const Tensor& b : buffers()) move_in_place(b, device, true);
  return *this;
}

}  // namespace adjoint::nn
