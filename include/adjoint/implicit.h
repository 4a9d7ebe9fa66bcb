// Implicit differentiation: matrix-free Krylov solvers (cg, gmres), a differentiable linear
// solve given as an operator (linear_solve, JAX's custom_linear_solve), and fixed points and
// roots whose derivatives come from the implicit function theorem (fixed_point, root, JAX's
// custom_root). The forward of each runs untraced, so memory does not grow with iterations.
// See docs/implicit-and-odes.md. ODE solvers are in odeint.h.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "adjoint/tensor.h"

namespace adjoint {

/// A linear map on tensors of one shape, u -> A u. cg and gmres call it untraced.
using MatVec = std::function<Tensor(const Tensor&)>;

/// When a Krylov solve stops: |b - A x| <= max(rtol |b|, atol), in the 2-norm over all
/// elements (computed without overflow; the solve runs on b / |b|, so huge and tiny b converge
/// as well-scaled ones do). Reaching max_iters first is a Value error naming the solver, the
/// residual and b's shape and dtype; so is a residual that becomes inf or NaN, and so are a
/// non-finite b or x0. Unset tolerances follow b's dtype: rtol 1e-10 and atol 1e-14 for
/// float64, 1e-5 and 1e-7 for float32 (whose rounding a tighter test could never pass). Set
/// ones must be finite and >= 0, max_iters >= 0 and restart >= 1 (else a Value error).
struct KrylovOptions {
  std::optional<double> rtol;
  std::optional<double> atol;
  int64_t max_iters = 1000;  ///< matrix-vector products at most
  int64_t restart = 30;      ///< gmres: Krylov basis size before a restart
};

/// Conjugate gradients for a symmetric positive-definite A. x0 (undefined: zeros) is the
/// first guess. Not differentiable itself: for gradients use linear_solve.
Tensor cg(const MatVec& A, const Tensor& b, const KrylovOptions& options = {},
          const Tensor& x0 = {});
/// Restarted GMRES(restart) for any non-singular A (modified Gram-Schmidt, Givens rotations).
Tensor gmres(const MatVec& A, const Tensor& b, const KrylovOptions& options = {},
             const Tensor& x0 = {});

/// u -> J u with J the Jacobian of f at x, by forward mode (one jvp per product).
MatVec jvp_matvec(std::function<Tensor(const Tensor&)> f, const Tensor& x);
/// u -> Jᵀ u with J the Jacobian of f at x: f is traced once, each product is a backward
/// pass through that graph (f must map a shape to itself for Jᵀ to be square).
MatVec vjp_matvec(std::function<Tensor(const Tensor&)> f, const Tensor& x);

/// A linear operator with explicit parameters: (u, params) -> A(params) u, linear in u. The
/// parameters are passed rather than captured so that gradients can reach them.
using LinearOperator = std::function<Tensor(const Tensor& u, const std::vector<Tensor>& params)>;

enum class KrylovMethod { CG, GMRES };

/// Builds, for given params, a MatVec for the untraced iterations (see LinearSolveOptions).
using MatVecFactory = std::function<MatVec(const std::vector<Tensor>& params)>;

struct LinearSolveOptions {
  KrylovMethod method = KrylovMethod::GMRES;
  KrylovOptions krylov;
  /// Aᵀ = A (CG implies it): the backward solve reuses A.
  bool symmetric = false;
  /// (u, params) -> A(params)ᵀ u when known; otherwise backward obtains it by a vjp of A.
  LinearOperator transpose;
  /// Optional speed-ups for the untraced Krylov iterations: given the params, a MatVec for
  /// A(params) (and for its transpose, used by the backward solve) built once per solve, e.g.
  /// a vjp traced once and pulled back for every product. The derivatives still use A.
  MatVecFactory bind, bind_transpose;
};

/// x with A(params) x = b, solved matrix-free by CG or GMRES, differentiable with respect to
/// b and params (which must be floating). The VJP solves the transposed system
/// Aᵀ λ = x̄ (itself a linear_solve, so it differentiates again): b̄ = λ,
/// params̄ = -(∂(A x)/∂params)ᵀ λ. The JVP solves A ẋ = ḃ - (∂(A x)/∂params) ṗ.
Tensor linear_solve(const LinearOperator& A, const Tensor& b,
                    const std::vector<Tensor>& params = {}, const LinearSolveOptions& options = {});

/// A function of a state x (any shape) and parameters, returning a tensor shaped like x.
using ImplicitFn = std::function<Tensor(const Tensor& x, const std::vector<Tensor>& params)>;
/// An iterative solver for the forward pass: given x -> r(x) (the map for fixed_point, the
/// residual for root) and a start, returns the solution. Runs without recording.
using ImplicitSolver = std::function<Tensor(const MatVec& fn, const Tensor& x0)>;

struct ImplicitOptions {
  /// Forward convergence: fixed_point stops when |f(x) - x| <= atol + rtol |x|; root when
  /// |g(x)| <= atol + rtol |g(x0)|. The solution is checked against the same test whatever
  /// solver produced it; failing is a Value error naming the op, residual, shapes and dtypes
  /// (a residual that is inf or NaN, at x0, during fixed_point's iteration or at the answer,
  /// is an error of its own). Unset: rtol 1e-10 and atol 1e-12 for a float64 x0, 1e-5 and
  /// 1e-6 for float32; set ones must be finite and >= 0, and max_iters >= 0.
  std::optional<double> rtol;
  std::optional<double> atol;
  int64_t max_iters = 1000;
  /// Replaces the default forward solver (fixed_point: plain iteration x <- f(x); root:
  /// Newton-GMRES with jvp products and backtracking).
  ImplicitSolver solver;
  /// The one linear solve of the VJP and JVP (GMRES by default).
  LinearSolveOptions linear;
};

/// x* = f(x*, params), found from x0 without recording; differentiable with respect to params
/// by the implicit function theorem: with J = ∂f/∂x at x*, x̄ gives
/// params̄ = (∂f/∂params)ᵀ w where (I - Jᵀ) w = x̄, and ẋ = (I - J)⁻¹ (∂f/∂params) ṗ. Each is
/// one linear_solve, so grad, jvp, hvp and double backward all work, with memory independent
/// of the iteration count. x0 gets no gradient (the fixed point does not depend on it).
Tensor fixed_point(const ImplicitFn& f, const Tensor& x0, const std::vector<Tensor>& params,
                   const ImplicitOptions& options = {});

/// x* with g(x*, params) = 0, found from x0 without recording; differentiable with respect to
/// params by the implicit function theorem: ẋ = -(∂g/∂x)⁻¹ (∂g/∂params) ṗ.
Tensor root(const ImplicitFn& g, const Tensor& x0, const std::vector<Tensor>& params,
            const ImplicitOptions& options = {});

}  // namespace adjoint
