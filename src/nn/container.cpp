// Sequential and MLP.
#include "adjoint/nn/container.h"

#include "adjoint/error.h"
#include "adjoint/nn/linear.h"

namespace adjoint::nn {

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) : Module("Sequential") {
  for (auto& m : modules) push_back(std::move(m));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& m : modules_) y = (*m)(y);
  return y;
}

std::shared_ptr<Module> Sequential::operator[](std::size_t i) const {
  ADJOINT_CHECK(i < modules_.size(), Index, "nn." + type_name(), "index ", i,
                " is out of range for ", type_name(), " of ", modules_.size(), " modules");
  return modules_[i];
}

void Sequential::throw_wrong_type(std::size_t i) const {
  throw Error(
      ErrorKind::Value, "nn." + type_name(),
      detail::str("module ", i, " is a ", modules_[i]->type_name(), ", not the type asked for"));
}

MLP::MLP(const std::vector<int64_t>& sizes, Activation activation, bool bias, Generator* gen)
    : Sequential("MLP") {
  ADJOINT_CHECK(sizes.size() >= 2, Value, "nn.MLP",
                "needs at least two sizes (input and output), got ", sizes.size());
  for (std::size_t i = 0; i + 1 < sizes.size(); ++i) {
    if (i > 0) push_back(make_activation(activation));
    push_back(std::make_shared<Linear>(sizes[i], sizes[i + 1], bias, gen));
  }
}

}  // namespace adjoint::nn
