// Linear solves and the Cholesky factor: solve (LU), solve_triangular and cholesky are
// primitives with their own rules; cholesky_solve and inv are written with them. Each rule
// solves again rather than keeping LAPACK's factors: simpler, and the rules stay ops.
#include "ops/linalg_util.h"

#include "backend/linalg_kernels.h"
#include "core/op_fields.h"

namespace adjoint {
namespace {

using linalg_detail::diag_embed;
using linalg_detail::diagonal;
using linalg_detail::mT;
using linalg_detail::sym;

// A X = B for square A [..., n, n], B [..., n, k] with equal batch dims.
struct Solve {
  static constexpr const char* name = "solve";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::InputsAndOutput;
  Tensor forward(const Tensor& a, const Tensor& b) const { return kernels::lu_solve(a, b, name); }
  // X = A⁻¹ B: gB = A⁻ᵀ gX, gA = -gB Xᵀ
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gx) const {
    Tensor gb = linalg::solve(mT(c.input(0)), gx);
    Tensor ga = c.needs_grad(0) ? -matmul(gb, mT(c.output())) : Tensor();
    return {ga, c.needs_grad(1) ? gb : Tensor()};
  }
  // dX = A⁻¹ (dB - dA X)
  static constexpr bool jvp_undefined_is_zero = true;
  Tensor jvp(const Ctx& c, const Tensor& ta, const Tensor& tb) const {
    Tensor rhs = sum_defined(tb, ta.defined() ? -matmul(ta, c.output()) : Tensor());
    return rhs.defined() ? linalg::solve(c.input(0), rhs) : zeros_like(c.output());
  }
  // Batching: both operands get the batch dim (their logical batch dims already agree).
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b.with_batch(0), b.with_batch(1)); }
};

// A X = B for triangular A; only the triangle LAPACK reads (strict when unit) takes gradient.
struct SolveTriangular {
  static constexpr const char* name = "solve_triangular";
  auto fields() { return std::tie(upper, unit); }
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::InputsAndOutput;
  bool upper = false, unit = false;
  Tensor forward(const Tensor& a, const Tensor& b) const {
    return kernels::triangular_solve(a, b, upper, unit, name);
  }
  Tensor triangle(const Tensor& x) const {
    return upper ? x.triu(unit ? 1 : 0) : x.tril(unit ? -1 : 0);
  }
  // X = A⁻¹ B: gB = A⁻ᵀ gX, gA = triangle(-gB Xᵀ)
  std::array<Tensor, 2> vjp(const Ctx& c, const Tensor& gx) const {
    Tensor gb = linalg::solve_triangular(mT(c.input(0)), gx, !upper, unit);
    Tensor ga = c.needs_grad(0) ? triangle(-matmul(gb, mT(c.output()))) : Tensor();
    return {ga, c.needs_grad(1) ? gb : Tensor()};
  }
  // dX = A⁻¹ (dB - triangle(dA) X)
  static constexpr bool jvp_undefined_is_zero = true;
  Tensor jvp(const Ctx& c, const Tensor& ta, const Tensor& tb) const {
    Tensor rhs = sum_defined(tb, ta.defined() ? -matmul(triangle(ta), c.output()) : Tensor());
    return rhs.defined() ? linalg::solve_triangular(c.input(0), rhs, upper, unit)
                         : zeros_like(c.output());
  }
  // Batching: both operands get the batch dim (their logical batch dims already agree).
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b.with_batch(0), b.with_batch(1)); }
};

// Note [Symmetric inputs]
// cholesky and eigh read only the lower triangle of A, and their derivatives are those of
// functions of a symmetric A: the JVP uses sym(dA) = (dA + dAᵀ)/2 and the VJP returns a
// symmetric gradient, as PyTorch's. The two are adjoint to each other (sym is self-adjoint),
// and they are exact for the perturbations that keep A symmetric, which is what the gradcheck
// samples feed them (A = X Xᵀ + c I or X + Xᵀ).

// A = L Lᵀ. See Note [Symmetric inputs].
struct Cholesky {
  static constexpr const char* name = "cholesky";
  static constexpr AutocastPolicy autocast = AutocastPolicy::Float32;
  static constexpr Save save = Save::Output;
  Tensor forward(const Tensor& a) const { return kernels::cholesky(a, name); }
  // tril with the diagonal halved: Φ(X) = tril(X) - diag(X)/2
  static Tensor phi(const Tensor& x) { return x.tril() - diag_embed(diagonal(x)) * 0.5; }
  // gA = L⁻ᵀ sym(Φ(Lᵀ gL)) L⁻¹
  Tensor vjp(const Ctx& c, const Tensor& gl) const {
    const Tensor& l = c.output();
    Tensor s = sym(phi(matmul(mT(l), gl)));
    Tensor left = linalg::solve_triangular(mT(l), s, /*upper=*/true);      // L⁻ᵀ S
    return mT(linalg::solve_triangular(mT(l), mT(left), /*upper=*/true));  // (L⁻ᵀ S) L⁻¹
  }
  // dL = L Φ(L⁻¹ sym(dA) L⁻ᵀ)
  Tensor jvp(const Ctx& c, const Tensor& ta) const {
    const Tensor& l = c.output();
    Tensor left = linalg::solve_triangular(l, sym(ta), /*upper=*/false);  // L⁻¹ dA
    Tensor both = mT(linalg::solve_triangular(l, mT(left), /*upper=*/false));
    return matmul(l, phi(both));
  }
  // Batching: LAPACK ops batch over leading dims; the batch dim is one more.
  Tensor vmap(const BatchArgs& b) const { return apply(*this, b[0]); }
};

}  // namespace

namespace linalg {

using linalg_detail::broadcast_batch;
using linalg_detail::check_same_dtype;
using linalg_detail::check_square;

Tensor solve(const Tensor& A, const Tensor& B) {
  check_square(A, "solve");
  ADJOINT_CHECK(B.defined() && B.dim() >= 1, Shape, "solve",
                "B must be a vector [n] or matrices [..., n, k], got ",
                B.defined() ? describe(B) : std::string("an undefined tensor"));
  check_same_dtype(A, B, "solve");
  if (B.dim() == 1) return solve(A, B.unsqueeze(-1)).squeeze(-1);
  auto [a, b] = broadcast_batch(A, B, "solve");
  return apply(Solve{}, a, b);
}

Tensor solve_triangular(const Tensor& A, const Tensor& B, bool upper, bool unitriangular) {
  const char* op = "solve_triangular";
  check_square(A, op);
  linalg_detail::check_matrix(B, op, "B");
  check_same_dtype(A, B, op);
  auto [a, b] = broadcast_batch(A, B, op);
  return apply(SolveTriangular{upper, unitriangular}, a, b);
}

Tensor cholesky(const Tensor& A) {
  check_square(A, "cholesky");
  return apply(Cholesky{}, A);
}

Tensor cholesky_solve(const Tensor& B, const Tensor& L) {
  const char* op = "cholesky_solve";
  check_square(L, op, "L");
  linalg_detail::check_matrix(B, op, "B");
  check_same_dtype(L, B, op);
  auto [l, b] = broadcast_batch(L, B, op);
  // (L Lᵀ) X = B: L Y = B, then Lᵀ X = Y.
  return solve_triangular(mT(l), solve_triangular(l, b, false), true);
}

Tensor inv(const Tensor& A) {
  check_square(A, "inv");
  return solve(A, linalg_detail::eye_like(A, A.size(-1)));
}

}  // namespace linalg
}  // namespace adjoint

ADJOINT_OPS_FILE(linalg_solve)
