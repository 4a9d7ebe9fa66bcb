// Matrix-free Krylov solvers (cg, gmres) and the jvp/vjp matrix-vector products they are fed
// with. They are plain iterations over tensors, run untraced: linear_solve (linear_solve.cpp)
// gives them derivatives by the implicit function theorem instead of unrolling.
#include <cmath>
#include <memory>

#include "adjoint/autograd.h"
#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/implicit.h"
#include "adjoint/ops.h"
#include "adjoint/transforms.h"
#include "scientific/per_example.h"
#include "scientific/precision.h"
#include "scientific/solver_args.h"

namespace adjoint {
namespace {

using detail::all_finite;
using detail::finite;
using detail::for_all;
using detail::hypot_of;
using detail::norm_of;
using detail::or_one;
using detail::worst;

// Per example (Note [Solvers under vmap] in per_example.h).
Tensor inner(const Tensor& a, const Tensor& b) { return (a * b).sum(); }

void check_system(const char* op, const Tensor& b, const Tensor& x0, const KrylovOptions& o) {
  ADJOINT_CHECK(b.defined(), Value, op, "the right-hand side b is undefined");
  ADJOINT_CHECK(is_floating(b.dtype()), DType, op, "b must be floating, got ", describe(b));
  detail::check_solver_precision(op, "b", b);
  ADJOINT_CHECK(!x0.defined() || (x0.shape() == b.shape() && x0.dtype() == b.dtype()), Shape, op,
                "the first guess x0 ", describe(x0), " does not match b ", describe(b));
  detail::check_krylov_options(op, o);
}

// A(u) with the shape and dtype checked: a mistake there would otherwise surface as a
// broadcasting error deep inside the iteration.
Tensor apply_op(const char* op, const MatVec& A, const Tensor& u) {
  Tensor v = A(u);
  ADJOINT_CHECK(v.defined() && v.shape() == u.shape() && v.dtype() == u.dtype(), Shape, op,
                "the operator must map ", describe(u), " to the same shape and dtype, got ",
                v.defined() ? describe(v) : std::string("an undefined tensor"));
  return v;
}

// Note [Scale-invariant Krylov]
// cg and gmres solve A x' = b' with b' = b / s, s = |b| per example, and return x = s x'. For
// a linear A that is the same x, but every vector of the iteration is O(1) instead of O(|b|),
// and CG's rᵀr and pᵀAp O(1) instead of O(|b|²), which overflows for |b| > 1e154 in float64
// (1e19 in float32). The stopping test |b - A x| <= max(rtol |b|, atol) is the same test in
// the scaled units: |b' - A x'| <= max(rtol |b'|, atol / s), so huge and tiny right-hand sides
// converge exactly as well-scaled ones do.
struct ScaledSystem {
  Tensor s;    // |b| per example (1 where b = 0)
  Tensor b;    // b / s
  Tensor x0;   // x0 / s, undefined when no first guess was given
  Tensor tol;  // the stopping tolerance in units of s
};

// Unset tolerances follow b's dtype. b (and x0) must be finite: a NaN or inf there has no
// meaningful solution and would otherwise run every iteration on NaN.
ScaledSystem scale_system(const char* op, const KrylovOptions& o, const Tensor& b,
                          const Tensor& x0) {
  ADJOINT_CHECK(for_all(all_finite(b)), Value, op,
                "b has non-finite entries (|b| = ", worst(norm_of(b)), ") for b ", describe(b));
  ADJOINT_CHECK(!x0.defined() || for_all(all_finite(x0)), Value, op,
                "the first guess x0 has non-finite entries for b ", describe(b));
  const bool f64 = b.dtype() == DType::Float64;
  const double rtol = o.rtol.value_or(f64 ? 1e-10 : 1e-5);
  const double atol = o.atol.value_or(f64 ? 1e-14 : 1e-7);
  ScaledSystem sys;
  sys.s = or_one(norm_of(b));
  sys.b = b.detach() / sys.s;
  if (x0.defined()) sys.x0 = x0.detach() / sys.s;
  sys.tol = maximum(norm_of(sys.b) * rtol, atol / sys.s);
  return sys;
}

// x = s x', which must be representable: a finite b whose solution overflows is an error, not
// an inf answer.
Tensor unscaled(const char* op, const Tensor& x, const ScaledSystem& sys, const Tensor& b) {
  Tensor out = x * sys.s;
  ADJOINT_CHECK(for_all(all_finite(out)), Value, op,
                "the solution overflows (|x| / |b| = ", worst(norm_of(x)), ", |b| = ", worst(sys.s),
                ") for b ", describe(b));
  return out;
}

// A residual that is inf or NaN fails every stopping test; it cannot recover, so it is named
// at once instead of after max_iters.
void check_finite_residual(const char* op, int64_t iters, const Tensor& res,
                           const ScaledSystem& sys, const Tensor& b) {
  ADJOINT_CHECK(for_all(finite(res)), Value, op, "the residual is not finite (", worst(res * sys.s),
                ") after ", iters, " matrix-vector products for b ", describe(b),
                ": the operator returned inf or NaN, or the iteration overflowed");
}

[[noreturn]] void not_converged(const char* op, int64_t iters, const Tensor& res,
                                const ScaledSystem& sys, const Tensor& b) {
  throw Error(ErrorKind::Value, op,
              detail::str("did not converge in ", iters, " matrix-vector products: residual ",
                          worst(res * sys.s), " > tolerance ", worst(sys.tol * sys.s), " for b ",
                          describe(b), " (raise max_iters or loosen rtol/atol)"));
}

}  // namespace

Tensor cg(const MatVec& A, const Tensor& b, const KrylovOptions& o, const Tensor& x0) {
  const char* op = "cg";
  check_system(op, b, x0, o);
  NoGradGuard no_grad;
  NoForwardGradGuard no_forward;
  // See Note [Scale-invariant Krylov].
  const ScaledSystem sys = scale_system(op, o, b, x0);
  Tensor x = x0.defined() ? sys.x0.clone() : zeros_like(b);
  Tensor r = x0.defined() ? sys.b - apply_op(op, A, x) : sys.b.clone();
  Tensor p = r;
  Tensor rs = inner(r, r);
  for (int64_t it = 0;; ++it) {
    // The residual's own norm, not sqrt(rᵀr): rᵀr underflows for tight tolerances.
    const Tensor res = norm_of(r);
    check_finite_residual(op, it, res, sys, b);
    // The examples still moving; the converged ones take steps of zero.
    const Tensor active = logical_not(le(res, sys.tol));
    if (for_all(logical_not(active))) return unscaled(op, x, sys, b);
    if (it >= o.max_iters) not_converged(op, it, res, sys, b);
    Tensor ap = apply_op(op, A, p);
    const Tensor pap = where(active, inner(p, ap), 1.0);
    ADJOINT_CHECK(for_all(finite(pap)), Value, op, "pᵀAp is not finite (", worst(pap),
                  ") at iteration ", it, " for b ", describe(b),
                  ": the operator returned inf or NaN, or overflowed");
    ADJOINT_CHECK(for_all(gt(pap, 0.0)), Value, op,
                  "the operator is not positive definite (pᵀAp <= 0 at iteration ", it, ") for b ",
                  describe(b), "; use gmres for general systems");
    const Tensor alpha = where(active, rs / pap, 0.0);
    x = x + p * alpha;
    r = r - ap * alpha;
    const Tensor rs_new = inner(r, r);
    p = r + p * where(active, rs_new / or_one(rs), 0.0);
    rs = rs_new;
  }
}

Tensor gmres(const MatVec& A, const Tensor& b, const KrylovOptions& o, const Tensor& x0) {
  const char* op = "gmres";
  check_system(op, b, x0, o);
  NoGradGuard no_grad;
  NoForwardGradGuard no_forward;
  // See Note [Scale-invariant Krylov].
  const ScaledSystem sys = scale_system(op, o, b, x0);
  const Tensor& tol = sys.tol;
  Tensor x = x0.defined() ? sys.x0.clone() : zeros_like(b);
  const int64_t m = o.restart;
  int64_t iters = 0;
  for (;;) {
    // Each restart starts from the true residual, so rounding in the rotations cannot fake
    // convergence.
    Tensor r = iters == 0 && !x0.defined() ? sys.b : sys.b - apply_op(op, A, x);
    const Tensor beta = norm_of(r);
    check_finite_residual(op, iters, beta, sys, b);
    if (for_all(le(beta, tol))) return unscaled(op, x, sys, b);
    if (iters >= o.max_iters) not_converged(op, iters, beta, sys, b);
    std::vector<Tensor> V{r / or_one(beta)};
    // H is (m + 1) x m upper Hessenberg, kept already rotated to upper triangular; its
    // entries, the rotations and g are per example.
    const Tensor zero = zeros_like(beta);
    std::vector<std::vector<Tensor>> H(m + 1, std::vector<Tensor>(m, zero));
    std::vector<Tensor> cs(m, zero), sn(m, zero), g(m + 1, zero);
    std::vector<Tensor> active;  // active[k]: the example had not converged before column k
    g[0] = beta;
    Tensor moving = logical_not(le(beta, tol));
    int64_t k = 0;
    while (k < m && iters < o.max_iters) {
      Tensor w = apply_op(op, A, V[k]);
      ++iters;
      for (int64_t i = 0; i <= k; ++i) {  // modified Gram-Schmidt
        H[i][k] = inner(w, V[i]);
        w = w - V[i] * H[i][k];
      }
      const Tensor h_next = norm_of(w);
      for (int64_t i = 0; i < k; ++i) {  // earlier rotations on the new column
        const Tensor t = cs[i] * H[i][k] + sn[i] * H[i + 1][k];
        H[i + 1][k] = -sn[i] * H[i][k] + cs[i] * H[i + 1][k];
        H[i][k] = t;
      }
      const Tensor d = hypot_of(H[k][k], h_next);
      const Tensor has_d = gt(d, 0.0);
      cs[k] = where(has_d, H[k][k] / or_one(d), 1.0);
      sn[k] = where(has_d, h_next / or_one(d), 0.0);
      H[k][k] = d;
      g[k + 1] = -sn[k] * g[k];
      g[k] = cs[k] * g[k];
      active.push_back(moving);
      ++k;
      // A lucky breakdown (h_next = 0) means x is exact in this space. A NaN stops the
      // cycle too (gt fails); the true residual at the restart then reports it.
      moving =
          logical_and(moving, logical_and(logical_not(le(abs(g[k]), tol)), gt(h_next, 1e-300)));
      if (for_all(logical_not(moving))) break;
      V.push_back(w / or_one(h_next));
    }
    // Back substitution for y in H[:k, :k] y = g[:k] over each example's own columns (the
    // later ones get y = 0), then x += V y.
    std::vector<Tensor> y(k, zero);
    for (int64_t i = k - 1; i >= 0; --i) {
      Tensor s = g[i];
      for (int64_t j = i + 1; j < k; ++j) s = s - H[i][j] * y[j];
      ADJOINT_CHECK(for_all(logical_or(logical_not(active[i]), ne(H[i][i], 0.0))), Value, op,
                    "the operator is singular for b ", describe(b));
      y[i] = where(active[i], s / or_one(H[i][i]), 0.0);
    }
    for (int64_t i = 0; i < k; ++i) x = x + V[i] * y[i];
  }
}

MatVec jvp_matvec(std::function<Tensor(const Tensor&)> f, const Tensor& x) {
  return [f = std::move(f), x = x.detach()](const Tensor& u) { return jvp(f, x, u).tangents; };
}

MatVec vjp_matvec(std::function<Tensor(const Tensor&)> f, const Tensor& x) {
  auto r = std::make_shared<VjpResult<Tensor, Tensor>>(vjp(f, x.detach()));
  return [r](const Tensor& u) { return r->pullback(u); };
}

}  // namespace adjoint
