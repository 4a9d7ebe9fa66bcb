// Determinants from an LU factorisation: det and slogdet's log|det| are primitives whose rules
// use A⁻ᵀ (through solve), so their derivatives at an exactly singular A raise solve's
// singular-matrix error (see docs/linalg.md). slogdet's sign is not differentiable.
#include "ops/linalg_util.h"

#include "backend/linalg_kernels.h"

namespace adjoint {
namespace {

using linalg_detail::diagonal;
using linalg_detail::mT;

/// x [...] seen as [..., 1, 1], to scale a batch of matrices.
Tensor per_matrix(const Tensor& x) { return x.unsqueeze(-1).unsqueeze(-1); }

struct Det {
  static constexpr const char* name = "det";
  static constexpr Save save = Save::InputsAndOutput;
  Tensor forward(const Tensor& a) const { return kernels::lu_det(a, name).det; }
  // d det(A) = det(A) tr(A⁻¹ dA): gA = g det(A) A⁻ᵀ
  Tensor vjp(const Ctx& c, const Tensor& g) const {
    return per_matrix(g * c.output()) * linalg::inv(mT(c.input(0)));
  }
  Tensor jvp(const Ctx& c, const Tensor& ta) const {
    return c.output() * diagonal(linalg::solve(c.input(0), ta)).sum({-1});
  }
};

struct LogAbsDet {
  static constexpr const char* name = "slogdet";
  static constexpr Save save = Save::Inputs;
  Tensor forward(const Tensor& a) const { return kernels::lu_det(a, name).logabsdet; }
  // d log|det(A)| = tr(A⁻¹ dA): gA = g A⁻ᵀ
  Tensor vjp(const Ctx& c, const Tensor& g) const {
    return per_matrix(g) * linalg::inv(mT(c.input(0)));
  }
  Tensor jvp(const Ctx& c, const Tensor& ta) const {
    return diagonal(linalg::solve(c.input(0), ta)).sum({-1});
  }
};

}  // namespace

namespace linalg {

Tensor det(const Tensor& A) {
  linalg_detail::check_square(A, "det");
  return apply(Det{}, A);
}

SlogdetResult slogdet(const Tensor& A) {
  linalg_detail::check_square(A, "slogdet");
  // The sign comes from a second LU of the data, with no history: it is piecewise constant.
  Tensor sign = kernels::lu_det(A, "slogdet").sign;
  return {sign, apply(LogAbsDet{}, A)};
}

}  // namespace linalg
}  // namespace adjoint
