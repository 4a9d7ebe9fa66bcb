// Ops whose results are not floating: comparisons, logical ops, argmax and argmin. They pass
// the dispatch stack like every op (so vmap batches them, compile records and exports them,
// observers and meta see them), but have nothing to differentiate. See Note [Ops without
// derivatives].
#pragma once

#include <array>
#include <cstddef>

#include "autograd/apply.h"

namespace adjoint::detail {

// Note [Ops without derivatives]
// apply<Op> records a node, and pushes tangents, only for a floating result (autograd_step in
// src/autograd/apply.h), so an op struct whose result is bool or an integer never has its rules
// called: its input may require grad or carry a tangent and its result still has neither, as
// in PyTorch. The struct still needs rules for apply to compile; NoDerivative gives them, and
// they say what is true almost everywhere: the derivative is zero.
template <std::size_t N>
struct NoDerivative {
  static constexpr Save save = Save::None;
  auto vjp(const Ctx&, const Tensor&) const {
    if constexpr (N == 1) {
      return Tensor();
    } else {
      return std::array<Tensor, N>{};
    }
  }
  template <class... Tangents>
  Tensor jvp(const Ctx&, const Tangents&...) const {
    return Tensor();
  }
};

}  // namespace adjoint::detail
