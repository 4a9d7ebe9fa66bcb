// A custom function shared by the tests of custom functions and of saved-tensor accounting:
// y = x^3 with its derivative written by hand, dy/dx = 3x^2, saving x for backward.
#pragma once

#include <string>
#include <vector>

#include "adjoint/adjoint.h"

namespace adjoint::testing {

struct Cube : Function<Cube> {
  static std::string name() { return "Cube"; }
  static Tensor forward(FunctionCtx& ctx, const Tensor& x) {
    ctx.save_for_backward({x});
    return x * x * x;
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    Tensor x = ctx.get_saved()[0];
    return {g[0] * 3 * x * x};
  }
};

}  // namespace adjoint::testing
