// The Linear layer and parameter count shared by the mlp, deep-mlp and hvp workloads.
// Parameters use libtorch's default Linear init, U(-1/sqrt(in), 1/sqrt(in)), drawn from
// adjoint's own seeded Generator, so values differ from libtorch but the work is the same.
#pragma once

#include <cmath>
#include <vector>

#include "adjoint/adjoint.h"

namespace bench {

/// One Linear(in, out) layer with bias: y = x Wᵀ + b.
struct Linear {
  adjoint::Tensor weight, bias;
  Linear(int64_t in, int64_t out, adjoint::Generator& gen) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    auto uniform = [&](const adjoint::Shape& shape) {
      adjoint::Tensor u = adjoint::rand(shape, {}, &gen) * (2 * bound) - bound;
      return u.detach().requires_grad_(true);
    };
    weight = uniform({out, in});
    bias = uniform({out});
  }
  adjoint::Tensor operator()(const adjoint::Tensor& x) const {
    return adjoint::linear(x, weight, bias);
  }
};

inline long long count_params(const std::vector<adjoint::Tensor>& ps) {
  long long n = 0;
  for (const auto& p : ps) n += p.numel();
  return n;
}

}  // namespace bench
