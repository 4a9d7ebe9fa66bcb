// Activation modules: each forward is the op of the same name.
#include "adjoint/nn/activation.h"

#include "adjoint/error.h"
#include "adjoint/ops.h"

namespace adjoint::nn {

Tensor ReLU::forward(const Tensor& x) { return relu(x); }
Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate_); }
Tensor Tanh::forward(const Tensor& x) { return tanh(x); }
Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }
Tensor SiLU::forward(const Tensor& x) { return silu(x); }

std::shared_ptr<Module> make_activation(Activation activation) {
  switch (activation) {
    case Activation::ReLU:
      return std::make_shared<ReLU>();
    case Activation::GELU:
      return std::make_shared<GELU>();
    case Activation::GELUTanh:
      return std::make_shared<GELU>(GeluApproximation::Tanh);
    case Activation::Tanh:
      return std::make_shared<Tanh>();
    case Activation::Sigmoid:
      return std::make_shared<Sigmoid>();
    case Activation::SiLU:
      return std::make_shared<SiLU>();
  }
  ADJOINT_CHECK(false, Value, "nn.make_activation", "unknown activation ",
                static_cast<int>(activation));
  return nullptr;
}

}  // namespace adjoint::nn
