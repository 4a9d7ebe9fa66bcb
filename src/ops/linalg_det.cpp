// Determinants from an LU factorisation: det and slogdet's log|det| are primitives whose rules
// use A⁻ᵀ (through solve). det's rules switch to the SVD at a singular A (Note [det at singular
// matrices]); log|det| is -inf there, and its derivative raises solve's singular-matrix error
// (see docs/linalg.md). slogdet's sign is not differentiable.
#include <cmath>

#include "ops/linalg_util.h"

#include "adjoint/transforms.h"

#include "backend/linalg_kernels.h"
#include "core/op_fields.h"

namespace adjoint {
namespace {

using linalg_detail::diagonal;
using linalg_detail::mT;

/// x [...] seen as [..., 1, 1], to scale a batch of matrices.
Tensor per_matrix(const Tensor& x) { return x.unsqueeze(-1).unsqueeze(-1); }

// Note [det at singular matrices]
// d det(A) = tr(adj(A) dA) holds everywhere, but the usual form adj(A) = det(A) A⁻¹ needs an
// invertible A, and it loses its digits well before A is exactly singular: the relative error
// of det(A)·A⁻¹ grows with A's condition number, so at a matrix singular up to rounding (two
// rows equal after scaling, say) it can be wrong in the first digit, or the inverse meets an
// exactly zero pivot. So when some matrix of the batch is near singular, |det A| at most
// sqrt(eps) times Hadamard's bound prod_i ||row_i|| (which |det A| never exceeds), the rules use
// the cofactor matrix from the SVD A = U diag(s) Vh instead:
// adj(A)ᵀ = det(U) det(Vh) U diag(π) Vh with π_i = prod_{j != i} s_j, which is finite and
// accurate at every A (zero when the rank is below n - 1), as PyTorch's linalg_det_backward
// does at singular matrices. It is written with svd, so double backward works where svd's
// rules do (distinct singular values). The choice is made matrix by matrix with where(), from
// a mask computed with ops: no rule reads values, so compile records it (both branches run).

/// Whether each matrix of the batch is near singular in the sense of the Note, as a bool
/// [..., 1, 1] (NaN takes the safe path too). Computed with ops, so a compiled function
/// decides again for each call's values; the rules then select with where() between two
/// branches that are each fed a safe matrix where they are not selected (see below).
Tensor near_singular(const Tensor& a, const Tensor& det) {
  const Tensor bound = a.detach().square().sum({-1}).sqrt().prod({-1});
  const double tol = std::sqrt(dtype_eps(a.dtype()));
  return per_matrix(logical_not(gt(det.detach().abs(), bound * tol)));
}

/// The two branches' inputs: A where it is selected, else a matrix at which the branch is
/// finite and smooth, so that where()'s zero gradient for the unselected branch is not
/// multiplied by an inf: the identity for det(A) A⁻ᵀ (inv would throw at an exactly singular
/// A), diag(1, ..., n) for the SVD (distinct singular values, where svd's rules are finite).
struct Branches {
  Tensor regular, singular;
};
Branches branch_inputs(const Tensor& a, const Tensor& mask) {
  const int64_t n = a.size(-1);
  const Tensor id = linalg_detail::eye_like(a, n);
  const Tensor distinct = linalg_detail::diag_embed(
      arange(1.0, n + 1.0, 1.0, TensorOptions(a.dtype()).device(a.device())));
  return {where(mask, id, a), where(mask, a, distinct)};
}

/// The cofactor matrix adj(A)ᵀ, [..., n, n], through the SVD (see the Note above).
Tensor cofactors(const Tensor& a) {
  const int64_t n = a.size(-1);
  const linalg::SvdResult r = linalg::svd(a);
  // π_i = prod_j t_ij with t_ij = s_j off the diagonal and 1 on it.
  const Tensor id = linalg_detail::eye_like(a, n);
  const Tensor others = (r.s.unsqueeze(-2) * (1.0 - id) + id).prod({-1});
  // det(U) det(Vh) = ±1 is piecewise constant: taken with no history (through det's forward,
  // which batches under vmap).
  const Tensor orientation = sign(linalg::det(r.u.detach()) * linalg::det(r.vh.detach()));
  return per_matrix(orientation) * matmul(r.u * others.unsqueeze(-2), r.vh);
}

/// adj(A)ᵀ with ops, both branches selected by where(): what DetCofactors computes, in a form
/// that differentiates (svd's rules, inv's), so its rules are this function's.
Tensor cofactors_composite(const Tensor& a) {
  const Tensor mask = near_singular(a, linalg::det(a.detach()));
  const Branches in = branch_inputs(a, mask);
  return where(mask, cofactors(in.singular),
               per_matrix(linalg::det(in.regular)) * linalg::inv(mT(in.regular)));
}

// adj(A)ᵀ, det's derivative, with the branch chosen matrix by matrix inside the kernel (Note
// [det's cofactors, matrix by matrix] in src/backend/cpu/lapack.cpp): a first derivative of
// det pays one LU per regular matrix. Its own derivatives, needed only from the second order
// on, are those of the composite, which computes both branches.
struct DetCofactors {
  static constexpr const char* name = "det_cofactors";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  Tensor forward(const Tensor& a) const {
    return kernels::det_cofactors(a, std::sqrt(dtype_eps(a.dtype())), name);
  }
  // d adj(A)ᵀ: the composite's pullback
  Tensor vjp(const Ctx& c, const Tensor& g) const {
    return adjoint::vjp(cofactors_composite, c.input(0)).pullback(g);
  }
  Tensor jvp(const Ctx& c, const Tensor& ta) const {
    return adjoint::jvp(cofactors_composite, c.input(0), ta).tangents;
  }
  // Batching: LAPACK ops batch over leading dims; the batch dim is one more.
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b[0]); }
};

struct Det {
  static constexpr const char* name = "det";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  Tensor forward(const Tensor& a) const { return kernels::lu_det(a, name).det; }
  // d det(A) = tr(adj(A) dA) = det(A) tr(A⁻¹ dA): gA = g adj(A)ᵀ = g det(A) A⁻ᵀ, or the
  // cofactors from the SVD where A is near singular (Note [det at singular matrices])
  Tensor vjp(const Ctx& c, const Tensor& g) const {
    return per_matrix(g) * apply(DetCofactors{}, c.input(0));
  }
  Tensor jvp(const Ctx& c, const Tensor& ta) const {
    return (apply(DetCofactors{}, c.input(0)) * ta).sum({-2, -1});
  }
  // Batching: LAPACK ops batch over leading dims; the batch dim is one more.
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b[0]); }
};

struct LogAbsDet {
  static constexpr const char* name = "slogdet";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Inputs;
  Tensor forward(const Tensor& a) const { return kernels::lu_det(a, name).logabsdet; }
  // d log|det(A)| = tr(A⁻¹ dA): gA = g A⁻ᵀ
  Tensor vjp(const Ctx& c, const Tensor& g) const {
    return per_matrix(g) * linalg::inv(mT(c.input(0)));
  }
  Tensor jvp(const Ctx& c, const Tensor& ta) const {
    return diagonal(linalg::solve(c.input(0), ta)).sum({-1});
  }
  // Batching: LAPACK ops batch over leading dims; the batch dim is one more.
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b[0]); }
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
  Tensor sign = detail::on_all_examples(
      A.detach(), [](const Tensor& a) { return kernels::lu_det(a, "slogdet").sign; });
  return {sign, apply(LogAbsDet{}, A)};
}

}  // namespace linalg
}  // namespace adjoint

ADJOINT_OPS_FILE(linalg_det)
