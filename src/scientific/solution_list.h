// The implicit solves and the ODE adjoint keep a solution and its parameters as one list,
// {x, params...}: it is what their derivative rules save, and the parameter list of the inner
// linear solves whose operators are Jacobians at x.
#pragma once

#include <vector>

#include "adjoint/tensor.h"

namespace adjoint::detail {

inline std::vector<Tensor> with_solution(const Tensor& x, const std::vector<Tensor>& params) {
  std::vector<Tensor> q{x};
  q.insert(q.end(), params.begin(), params.end());
  return q;
}

/// The parameters of a {x, params...} list.
inline std::vector<Tensor> params_of(const std::vector<Tensor>& q) {
  return std::vector<Tensor>(q.begin() + 1, q.end());
}

}  // namespace adjoint::detail
