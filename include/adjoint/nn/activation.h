// Activation modules (ReLU, GELU in its erf and tanh forms, Tanh, Sigmoid, SiLU): parameter-
// free wrappers over the ops of the same name, so activations can sit in a Sequential.
#pragma once

#include <memory>

#include "adjoint/nn/module.h"

namespace adjoint::nn {

/// max(x, 0).
class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
};

/// x Φ(x) (erf form, the default) or its tanh approximation
/// 0.5 x (1 + tanh(sqrt(2/π) (x + 0.044715 x³))) (GPT-2's).
class GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximate = GeluApproximation::None)
      : Module("GELU"), approximate_(approximate) {}
  Tensor forward(const Tensor& x) override;
  GeluApproximation approximate() const { return approximate_; }

 private:
  GeluApproximation approximate_;
};

/// tanh(x).
class Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& x) override;
};

/// 1 / (1 + exp(-x)).
class Sigmoid : public Module {
 public:
  Sigmoid() : Module("Sigmoid") {}
  Tensor forward(const Tensor& x) override;
};

/// x sigmoid(x) (also called swish).
class SiLU : public Module {
 public:
  SiLU() : Module("SiLU") {}
  Tensor forward(const Tensor& x) override;
};

/// Names an activation, for layers that build their own (MLP).
enum class Activation { ReLU, GELU, GELUTanh, Tanh, Sigmoid, SiLU };

/// A new module computing `activation`.
std::shared_ptr<Module> make_activation(Activation activation);

}  // namespace adjoint::nn
