// Gradcheck samples for the implicit solves of adjoint/implicit.h (src/scientific), named
// "scientific/<op>/<case>": VJP, JVP and double backward against finite differences, through
// the implicit-function-theorem rules. Tolerances of the solves are tight (1e-14) so that the
// finite differences are not swamped by the solver's own error.
#include "support/registry.h"

namespace {

using namespace adjoint;
using namespace adjoint::testing;

LinearSolveOptions tight_linear() {
  LinearSolveOptions o;
  o.krylov.rtol = 1e-14;
  o.krylov.atol = 1e-15;
  return o;
}

ImplicitOptions tight() {
  ImplicitOptions o;
  o.rtol = 1e-14;
  o.atol = 1e-15;
  o.linear = tight_linear();
  return o;
}

Tensor mv(const Tensor& m, const Tensor& u) { return matmul(m, u.unsqueeze(1)).squeeze(1); }

}  // namespace

ADJOINT_REGISTER_SAMPLES(scientific) {
  auto solve = [](KrylovMethod method) {
    return [method](const Inputs& x) {
      LinearSolveOptions o = tight_linear();
      o.method = method;
      // CG needs a symmetric positive-definite operator: M Mᵀ + 4 I; GMRES takes M + 4 I.
      LinearOperator A = [method](const Tensor& u, const std::vector<Tensor>& p) {
        const Tensor& m = p[0];
        return method == KrylovMethod::CG ? mv(m, mv(m.t(), u)) + u * 4.0 : mv(m, u) + u * 4.0;
      };
      return linear_solve(A, x[1], {x[0]}, o);
    };
  };
  sink.add("scientific/linear_solve/gmres", solve(KrylovMethod::GMRES),
           {randn64({3, 3}), randn64({3})});
  sink.add("scientific/linear_solve/cg", solve(KrylovMethod::CG), {randn64({3, 3}), randn64({3})});
  sink.add("scientific/linear_solve/constant_operator", solve(KrylovMethod::GMRES),
           {constant(randn64({3, 3})), randn64({3})});

  auto fixed = [](const Inputs& x) {
    ImplicitFn f = [](const Tensor& z, const std::vector<Tensor>& p) {
      return tanh(mv(p[0], z) * 0.2 + p[1]);
    };
    return fixed_point(f, zeros({3}, DType::Float64), {x[0], x[1]}, tight());
  };
  sink.add("scientific/fixed_point/tanh_layer", fixed, {randn64({3, 3}), randn64({3})});

  auto cubic = [](const Inputs& x) {
    ImplicitFn g = [](const Tensor& z, const std::vector<Tensor>& p) {
      return z * z * z + z * (p[0] * p[0] + 1.0) - p[1];
    };
    return root(g, zeros({3}, DType::Float64), {x[0], x[1]}, tight());
  };
  sink.add("scientific/root/cubic", cubic, {randn64({3}), randn64({3})});
}
