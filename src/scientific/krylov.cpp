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

namespace adjoint {
namespace {

// Inner products accumulate in double whatever the dtype: the tolerances are absolute.
double dot_all(const Tensor& a, const Tensor& b) { return (a * b).sum().item<double>(); }
double norm_all(const Tensor& a) { return std::sqrt(dot_all(a, a)); }

void check_system(const char* op, const Tensor& b, const Tensor& x0, const KrylovOptions& o) {
  ADJOINT_CHECK(b.defined(), Value, op, "the right-hand side b is undefined");
  ADJOINT_CHECK(is_floating(b.dtype()), DType, op, "b must be floating, got ", describe(b));
  ADJOINT_CHECK(!x0.defined() || (x0.shape() == b.shape() && x0.dtype() == b.dtype()), Shape, op,
                "the first guess x0 ", describe(x0), " does not match b ", describe(b));
  ADJOINT_CHECK(o.max_iters >= 0 && o.restart >= 1, Value, op, "max_iters (", o.max_iters,
                ") must be >= 0 and restart (", o.restart, ") >= 1");
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

// The stopping test |r| <= max(rtol |b|, atol), with unset tolerances by b's dtype.
double tolerance(const KrylovOptions& o, const Tensor& b) {
  const bool f64 = b.dtype() == DType::Float64;
  const double rtol = o.rtol.value_or(f64 ? 1e-10 : 1e-5);
  const double atol = o.atol.value_or(f64 ? 1e-14 : 1e-7);
  return std::max(rtol * norm_all(b), atol);
}

[[noreturn]] void not_converged(const char* op, int64_t iters, double res, double tol,
                                const Tensor& b) {
  throw Error(ErrorKind::Value, op,
              detail::str("did not converge in ", iters, " matrix-vector products: residual ", res,
                          " > tolerance ", tol, " for b ", describe(b),
                          " (raise max_iters or loosen rtol/atol)"));
}

}  // namespace

Tensor cg(const MatVec& A, const Tensor& b, const KrylovOptions& o, const Tensor& x0) {
  const char* op = "cg";
  check_system(op, b, x0, o);
  NoGradGuard no_grad;
  NoForwardGradGuard no_forward;
  const double tol = tolerance(o, b);
  Tensor x = x0.defined() ? x0.detach().clone() : zeros_like(b);
  Tensor r = x0.defined() ? b - apply_op(op, A, x) : b.detach().clone();
  Tensor p = r;
  double rs = dot_all(r, r);
  for (int64_t it = 0;; ++it) {
    if (std::sqrt(rs) <= tol) return x;
    if (it >= o.max_iters) not_converged(op, it, std::sqrt(rs), tol, b);
    Tensor ap = apply_op(op, A, p);
    const double pap = dot_all(p, ap);
    ADJOINT_CHECK(pap > 0 && std::isfinite(pap), Value, op,
                  "the operator is not positive definite (pᵀAp = ", pap, " at iteration ", it,
                  ") for b ", describe(b), "; use gmres for general systems");
    const double alpha = rs / pap;
    x = x + p * alpha;
    r = r - ap * alpha;
    const double rs_new = dot_all(r, r);
    p = r + p * (rs_new / rs);
    rs = rs_new;
  }
}

Tensor gmres(const MatVec& A, const Tensor& b, const KrylovOptions& o, const Tensor& x0) {
  const char* op = "gmres";
  check_system(op, b, x0, o);
  NoGradGuard no_grad;
  NoForwardGradGuard no_forward;
  const double tol = tolerance(o, b);
  Tensor x = x0.defined() ? x0.detach().clone() : zeros_like(b);
  const int64_t m = o.restart;
  int64_t iters = 0;
  for (;;) {
    // Each restart starts from the true residual, so rounding in the rotations cannot fake
    // convergence.
    Tensor r = iters == 0 && !x0.defined() ? b.detach() : b - apply_op(op, A, x);
    const double beta = norm_all(r);
    if (beta <= tol) return x;
    if (iters >= o.max_iters) not_converged(op, iters, beta, tol, b);
    std::vector<Tensor> V{r / beta};
    // H is (m + 1) x m upper Hessenberg, kept already rotated to upper triangular.
    std::vector<std::vector<double>> H(m + 1, std::vector<double>(m, 0.0));
    std::vector<double> cs(m, 0.0), sn(m, 0.0), g(m + 1, 0.0);
    g[0] = beta;
    int64_t k = 0;
    while (k < m && iters < o.max_iters) {
      Tensor w = apply_op(op, A, V[k]);
      ++iters;
      for (int64_t i = 0; i <= k; ++i) {  // modified Gram-Schmidt
        H[i][k] = dot_all(w, V[i]);
        w = w - V[i] * H[i][k];
      }
      const double h_next = norm_all(w);
      for (int64_t i = 0; i < k; ++i) {  // earlier rotations on the new column
        const double t = cs[i] * H[i][k] + sn[i] * H[i + 1][k];
        H[i + 1][k] = -sn[i] * H[i][k] + cs[i] * H[i + 1][k];
        H[i][k] = t;
      }
      const double d = std::hypot(H[k][k], h_next);
      cs[k] = d > 0 ? H[k][k] / d : 1.0;
      sn[k] = d > 0 ? h_next / d : 0.0;
      H[k][k] = d;
      g[k + 1] = -sn[k] * g[k];
      g[k] = cs[k] * g[k];
      ++k;
      // A lucky breakdown (h_next = 0) means x is exact in this space.
      if (std::abs(g[k]) <= tol || h_next <= 1e-300) break;
      V.push_back(w / h_next);
    }
    // Back substitution for y in H[:k, :k] y = g[:k], then x += V y.
    std::vector<double> y(k, 0.0);
    for (int64_t i = k - 1; i >= 0; --i) {
      double s = g[i];
      for (int64_t j = i + 1; j < k; ++j) s -= H[i][j] * y[j];
      ADJOINT_CHECK(H[i][i] != 0, Value, op, "the operator is singular for b ", describe(b));
      y[i] = s / H[i][i];
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
