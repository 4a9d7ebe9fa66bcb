// Containers: Sequential (modules applied in order) and MLP (a Sequential of Linear layers
// with an activation between them).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "adjoint/generator.h"
#include "adjoint/nn/activation.h"
#include "adjoint/nn/module.h"

namespace adjoint::nn {

/// Applies its modules in order, each one's forward(const Tensor&) feeding the next. The
/// modules are children named "0", "1", ..., so a parameter reads "2.weight".
///
///   auto net =
///   std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
///       std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(),
///       std::make_shared<nn::Linear>(8, 1)});
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules)
      : Sequential(std::vector<std::shared_ptr<Module>>(modules)) {}

  /// Appends `module` as the child named by the next index; returns it typed.
  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(modules_.size()), module);
    modules_.push_back(module);
    return module;
  }
  Tensor forward(const Tensor& x) override;

  std::size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  /// The i-th module; an Index error when out of range.
  std::shared_ptr<Module> operator[](std::size_t i) const;
  /// The i-th module cast to M; a Value error when it is not an M.
  template <class M>
  std::shared_ptr<M> at(std::size_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    if (!m) throw_wrong_type(i);
    return m;
  }

 protected:
  /// For subclasses that are Sequentials with another name (MLP).
  explicit Sequential(std::string type_name) : Module(std::move(type_name)) {}
  void child_replaced(std::size_t index, const std::shared_ptr<Module>& replacement) override {
    if (index < modules_.size()) modules_[index] = replacement;  // children_ in modules_' order
  }

 private:
  [[noreturn]] void throw_wrong_type(std::size_t i) const;
  std::vector<std::shared_ptr<Module>> modules_;
};

/// Linear(sizes[0], sizes[1]), activation, Linear(sizes[1], sizes[2]), ..., with no
/// activation after the last Linear. Children are numbered as in Sequential, so the
/// parameters are "0.weight", "0.bias", "2.weight", ... Needs at least two sizes.
class MLP : public Sequential {
 public:
  explicit MLP(const std::vector<int64_t>& sizes, Activation activation = Activation::ReLU,
               bool bias = true, Generator* gen = nullptr);
};

}  // namespace adjoint::nn
