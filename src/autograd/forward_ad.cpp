// Forward mode: dual levels and dual tensors. apply<Op> propagates tangents through each op's
// JVP rule while a level is active. One level for now; nested levels arrive with the function
// transforms.
#include "adjoint/autograd.h"
#include "adjoint/detail/pool.h"
#include "adjoint/error.h"
#include "adjoint/tensor_impl.h"
#include "autograd/apply.h"
#include "core/mode_state.h"

namespace adjoint {

DualLevel::DualLevel() {
  ADJOINT_CHECK(tls_mode.dual_levels == 0, NotImplemented, "DualLevel",
                "nested dual levels are not supported yet; use one DualLevel at a time");
  ++tls_mode.dual_levels;
}
DualLevel::~DualLevel() { --tls_mode.dual_levels; }

Tensor make_dual(const Tensor& primal, const Tensor& tangent) {
  ADJOINT_CHECK(tls_mode.dual_levels > 0, Autograd, "make_dual",
                "make_dual needs an active DualLevel");
  ADJOINT_CHECK(primal.defined() && tangent.defined(), Value, "make_dual",
                "primal and tangent must be defined");
  ADJOINT_CHECK(primal.shape() == tangent.shape() && primal.dtype() == tangent.dtype(), Shape,
                "make_dual", "tangent ", describe(tangent), " does not match primal ",
                describe(primal));
  ADJOINT_CHECK(is_floating(primal.dtype()), DType, "make_dual",
                "only floating tensors can carry tangents, got ", describe(primal));
  Tensor dual = detail::alias_with_history(primal);
  dual.impl()->meta().tangent = tangent;
  return dual;
}

std::pair<Tensor, Tensor> unpack_dual(const Tensor& dual) {
  return {detail::alias_with_history(dual), dual.tangent()};
}

}  // namespace adjoint
