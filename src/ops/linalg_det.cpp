// Determinants from an LU factorisation: det and slogdet's log|det| are primitives whose rules
// use A⁻ᵀ (through solve). det's rules switch to the SVD at a singular A (Note [det at singular
// matrices]); log|det| is -inf there, and its derivative raises solve's singular-matrix error
// (see docs/linalg.md). slogdet's sign is not differentiable.
#include <cmath>

#include "ops/linalg_util.h"

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
// rules do (distinct singular values).

/// Whether some matrix of the batch is near singular in the sense of the Note (read off the
/// data; under vmap, of any example).
bool near_singular(const Tensor& a, const Tensor& det) {
  const Tensor all = detail::all_examples(a.detach()).to(DType::Float64);
  const std::vector<double> bound = all.square().sum({-1}).sqrt().prod({-1}).to_vector<double>();
  const std::vector<double> d =
      detail::all_examples(det.detach()).to(DType::Float64).to_vector<double>();
  const double tol = std::sqrt(dtype_eps(a.dtype()));
  for (std::size_t i = 0; i < d.size(); ++i)
    if (!(std::abs(d[i]) > tol * bound[i])) return true;  // NaN takes the safe path too
  return false;
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

struct Det {
  static constexpr const char* name = "det";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::InputsAndOutput;
  Tensor forward(const Tensor& a) const { return kernels::lu_det(a, name).det; }
  // d det(A) = tr(adj(A) dA) = det(A) tr(A⁻¹ dA): gA = g adj(A)ᵀ = g det(A) A⁻ᵀ
  Tensor vjp(const Ctx& c, const Tensor& g) const {
    if (near_singular(c.input(0), c.output())) return per_matrix(g) * cofactors(c.input(0));
    return per_matrix(g * c.output()) * linalg::inv(mT(c.input(0)));
  }
  Tensor jvp(const Ctx& c, const Tensor& ta) const {
    if (near_singular(c.input(0), c.output())) return (cofactors(c.input(0)) * ta).sum({-2, -1});
    return c.output() * diagonal(linalg::solve(c.input(0), ta)).sum({-1});
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
