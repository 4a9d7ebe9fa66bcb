// nn::Dropout: zeroes random elements while training and is the identity in eval mode.
#pragma once

#include "adjoint/generator.h"
#include "adjoint/nn/module.h"

namespace adjoint::nn {

/// In training mode each element is zeroed with probability p and the others are scaled by
/// 1/(1-p), so the expectation is unchanged; in eval mode (or with p = 0) forward returns
/// its input as is. The module holds its own Generator. When p > 0 it is seeded at
/// construction by one draw from `seed_from` (the default generator when null), so a
/// model's dropout masks are reproducible from the seed it was built with and do not depend
/// on the caller keeping a generator alive; with p = 0 nothing is drawn, so adding
/// Dropout(0) layers does not change a model's initial weights. generator() reseeds it.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* seed_from = nullptr);
  Tensor forward(const Tensor& x) override;

  double p() const { return p_; }
  Generator& generator() { return gen_; }

 private:
  double p_;
  Generator gen_;
};

}  // namespace adjoint::nn
