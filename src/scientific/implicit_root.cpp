// fixed_point and root: the forward runs an iterative solver untraced; derivatives come from
// the implicit function theorem applied to the residual G(x, p) = 0 (G = g for root,
// G = x - f(x, p) for fixed_point): ẋ = -(∂G/∂x)⁻¹ (∂G/∂p) ṗ and, with (∂G/∂x)ᵀ w = x̄,
// p̄ = -(∂G/∂p)ᵀ w. Each is one linear_solve, whose own rules make every order work.
#include <any>
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
#include "scientific/solution_list.h"
#include "scientific/solver_args.h"

namespace adjoint {
namespace {

struct RootSpec {
  const char* op;
  ImplicitFn f;  // fixed_point's map (empty for root)
  ImplicitFn G;  // the residual whose zero is the solution
  ImplicitOptions options;
};

using detail::all_finite;
using detail::finite;
using detail::for_all;
using detail::norm_of;
using detail::worst;

// Unset tolerances by x0's dtype (float32 cannot meet float64's).
double rtol_of(const RootSpec& s, DType dtype) {
  return s.options.rtol.value_or(dtype == DType::Float64 ? 1e-10 : 1e-5);
}
double atol_of(const RootSpec& s, DType dtype) {
  return s.options.atol.value_or(dtype == DType::Float64 ? 1e-12 : 1e-6);
}

std::string describe_all(const Tensor& x0, const std::vector<Tensor>& params) {
  std::string s = detail::str("x0 ", describe(x0), ", params [");
  for (std::size_t i = 0; i < params.size(); ++i) s += (i ? ", " : "") + describe(params[i]);
  return s + "]";
}

Tensor checked_call(const RootSpec& s, const ImplicitFn& fn, const Tensor& x,
                    const std::vector<Tensor>& p) {
  Tensor y = fn(x, p);
  ADJOINT_CHECK(y.defined() && y.shape() == x.shape() && y.dtype() == x.dtype(), Shape, s.op,
                "the function must return a tensor shaped like x ", describe(x), ", got ",
                y.defined() ? describe(y) : std::string("an undefined tensor"));
  return y;
}

// Plain iteration x <- f(x) until the step is within tolerance, per example (Note [Solvers
// under vmap] in per_example.h: a converged example keeps its x). A step that is inf or NaN
// fails every test and cannot recover: the iteration diverged, and says so at once.
Tensor iterate(const RootSpec& s, const MatVec& f, const Tensor& x0,
               const std::vector<Tensor>& params) {
  const double rtol = rtol_of(s, x0.dtype()), atol = atol_of(s, x0.dtype());
  Tensor x = x0;
  Tensor moving = ones({}, DType::Bool);
  for (int64_t it = 0; it < s.options.max_iters; ++it) {
    Tensor next = f(x);
    const Tensor step = norm_of(next - x);
    ADJOINT_CHECK(for_all(logical_or(logical_not(moving), finite(step))), Value, s.op,
                  "diverged: |f(x) - x| is not finite (", worst(where(moving, step, 0.0)),
                  ") at iteration ", it + 1, " for ", describe_all(x0, params),
                  " (plain iteration needs f to be a contraction near the fixed point)");
    x = where(moving, next, x);
    const Tensor converged = le(step, norm_of(next) * rtol + atol);
    moving = logical_and(moving, logical_not(converged));
    if (for_all(logical_not(moving))) break;
  }
  return x;
}

// Newton-GMRES: J δ = -g(x) with J u by forward mode, then a backtracking line search on |g|,
// per example (a converged example stops; each has its own step length t). Only points with
// a finite residual are accepted; an example that finds none down to t < 1e-4 stops where it
// is, and the residual check after the solve reports it. r0 = |g(x0)|, finite.
Tensor newton(const RootSpec& s, const MatVec& g, const Tensor& x0, const Tensor& r0) {
  Tensor x = x0;
  Tensor r = g(x);
  Tensor rn = r0;
  const Tensor tol = rn * rtol_of(s, x0.dtype()) + atol_of(s, x0.dtype());
  KrylovOptions inner = s.options.linear.krylov;
  const double tightest = detail::all_examples(tol).min().item<double>();
  inner.atol = std::max(inner.atol.value_or(0.0), 0.1 * tightest);
  Tensor moving = logical_not(le(rn, tol));
  for (int64_t it = 0; it < s.options.max_iters && !for_all(logical_not(moving)); ++it) {
    Tensor delta;
    try {
      delta = gmres(jvp_matvec(g, x), -r, inner);
    } catch (const Error&) {
      break;  // a singular Jacobian: the residual check after the solve reports it
    }
    Tensor t = ones_like(rn);
    Tensor searching = moving;
    for (;;) {
      Tensor xn = x + delta * t;
      Tensor rn_t = g(xn);
      const Tensor n = norm_of(rn_t);
      const Tensor shortest = lt(t, 1e-4);
      // Sufficient decrease (NaN fails it), or the shortest step if its residual is finite.
      const Tensor accept = logical_and(
          searching, logical_or(le(n, (1 - t * 1e-4) * rn), logical_and(shortest, finite(n))));
      const Tensor stuck = logical_and(logical_and(searching, logical_not(accept)), shortest);
      x = where(accept, xn, x);
      r = where(accept, rn_t, r);
      rn = where(accept, n, rn);
      moving = logical_and(moving, logical_not(stuck));
      searching = logical_and(searching, logical_not(logical_or(accept, stuck)));
      if (for_all(logical_not(searching))) break;
      t = where(searching, t * 0.5, t);
    }
    moving = logical_and(moving, logical_not(le(rn, tol)));
  }
  return x;
}

LinearOperator jacobian_op(ImplicitFn G) {  // (u, {x, p...}) -> ∂G/∂x u
  return [G](const Tensor& u, const std::vector<Tensor>& q) {
    const std::vector<Tensor> p = detail::params_of(q);
    return jvp([&](const Tensor& v) { return G(v, p); }, q[0], u).tangents;
  };
}
LinearOperator jacobian_t_op(ImplicitFn G) {  // (u, {x, p...}) -> (∂G/∂x)ᵀ u
  return [G](const Tensor& u, const std::vector<Tensor>& q) {
    const std::vector<Tensor> p = detail::params_of(q);
    return vjp([&](const Tensor& v) { return G(v, p); }, q[0]).pullback(u);
  };
}

// The same two products for the untraced Krylov iterations, with G traced once per solve:
// the transpose by pulling back one recorded graph, the Jacobian by one jvp per product.
MatVec bound_jacobian_t(const ImplicitFn& G, const std::vector<Tensor>& q) {
  const std::vector<Tensor> p = detail::params_of(q);
  return vjp_matvec([G, p](const Tensor& v) { return G(v, p); }, q[0]);
}
MatVec bound_jacobian(const ImplicitFn& G, const std::vector<Tensor>& q) {
  const std::vector<Tensor> p = detail::params_of(q);
  return jvp_matvec([G, p](const Tensor& v) { return G(v, p); }, q[0]);
}

// The linear solve options of the VJP (transposed = true) or the JVP.
LinearSolveOptions solve_options(const RootSpec& s, bool transposed) {
  LinearSolveOptions lo = s.options.linear;
  const ImplicitFn G = s.G;
  auto fwd = [G](const std::vector<Tensor>& q) { return bound_jacobian(G, q); };
  auto bwd = [G](const std::vector<Tensor>& q) { return bound_jacobian_t(G, q); };
  lo.transpose = transposed ? jacobian_op(G) : jacobian_t_op(G);
  lo.bind = transposed ? decltype(lo.bind)(bwd) : decltype(lo.bind)(fwd);
  lo.bind_transpose = transposed ? decltype(lo.bind)(fwd) : decltype(lo.bind)(bwd);
  return lo;
}

struct ImplicitRootFn : Function<ImplicitRootFn> {
  static std::string name() { return "implicit_root"; }

  // x0 is an argument (under compile, each replay's own first guess), without a gradient.
  static Tensor forward(FunctionCtx& ctx, const Tensor& x0, const std::vector<Tensor>& params,
                        const std::shared_ptr<const RootSpec>& spec) {
    const RootSpec& s = *spec;
    ADJOINT_CHECK(for_all(all_finite(x0)), Value, s.op, "x0 has non-finite entries (", describe(x0),
                  ")");
    const bool fp = static_cast<bool>(s.f);
    const MatVec fn = [&](const Tensor& x) { return checked_call(s, fp ? s.f : s.G, x, params); };
    const char* residual = fp ? "|f(x) - x|" : "|g(x)|";
    // The residual at the start: root's tolerance is relative to it, and a non-finite one
    // (f or g overflowing at x0) leaves nothing to converge from.
    const Tensor r0 = norm_of(checked_call(s, s.G, x0, params));
    ADJOINT_CHECK(for_all(finite(r0)), Value, s.op, "the residual ", residual,
                  " is not finite at x0 (", worst(r0), ") for ", describe_all(x0, params));
    Tensor x = s.options.solver ? s.options.solver(fn, x0)
               : fp             ? iterate(s, fn, x0, params)
                                : newton(s, fn, x0, r0);
    ADJOINT_CHECK(x.defined() && x.shape() == x0.shape() && x.dtype() == x0.dtype(), Shape, s.op,
                  "the solver returned ",
                  x.defined() ? describe(x) : std::string("an undefined tensor"), " for ",
                  describe(x0));
    // The solution is checked whatever produced it: an unconverged x would give gradients of
    // the wrong point without any sign. Per example; NaN and inf fail the comparisons, and a
    // non-finite x or residual is named as such.
    ADJOINT_CHECK(for_all(all_finite(x)), Value, s.op,
                  "the solver returned a non-finite solution for ", describe_all(x0, params));
    const Tensor res = norm_of(checked_call(s, s.G, x, params));
    ADJOINT_CHECK(for_all(finite(res)), Value, s.op, "the residual ", residual,
                  " is not finite at the solution (", worst(res), ") for ",
                  describe_all(x0, params));
    const Tensor tol = (fp ? norm_of(x) : r0) * rtol_of(s, x0.dtype()) + atol_of(s, x0.dtype());
    if (!for_all(le(res, tol))) {
      const double worst_res = worst(res), start = worst(r0);
      throw Error(ErrorKind::Value, s.op,
                  detail::str("did not converge in ", s.options.max_iters, " iterations: ",
                              residual, " = ", worst_res, " > tolerance ", worst(tol),
                              worst_res > start ? detail::str(" (", start, " at x0: diverging)")
                                                : std::string(),
                              " for ", describe_all(x0, params)));
    }
    ctx.save_for_backward(detail::with_solution(x, params));
    ctx.saved_data["spec"] = spec;
    return x;
  }

  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    auto spec = std::any_cast<std::shared_ptr<const RootSpec>>(ctx.saved_data.at("spec"));
    const std::vector<Tensor> q = ctx.get_saved();  // {x, params...}
    const Tensor x = q[0];
    const std::vector<Tensor> params = detail::params_of(q);
    const Tensor w = linear_solve(jacobian_t_op(spec->G), g[0], q, solve_options(*spec, true));
    auto r = vjp([&](const std::vector<Tensor>& p) { return spec->G(x, p); }, params);
    std::vector<Tensor> gp = r.pullback(w);
    std::vector<Tensor> out{Tensor()};  // x0: the solution does not depend on it
    for (std::size_t i = 0; i < params.size(); ++i)
      out.push_back(ctx.needs_input_grad(1 + i) ? -gp[i] : Tensor());
    return out;
  }

  static std::vector<Tensor> jvp(FunctionCtx& ctx, std::vector<Tensor> t) {
    auto spec = std::any_cast<std::shared_ptr<const RootSpec>>(ctx.saved_data.at("spec"));
    const std::vector<Tensor> q = ctx.get_saved();
    const Tensor x = q[0];
    const std::vector<Tensor> params = detail::params_of(q);
    std::vector<Tensor> tp(t.begin() + 1, t.end());  // x0's tangent does not matter
    for (std::size_t i = 0; i < tp.size(); ++i)
      if (!tp[i].defined()) tp[i] = zeros_like(params[i]);
    const Tensor rhs =
        adjoint::jvp([&](const std::vector<Tensor>& p) { return spec->G(x, p); }, params, tp)
            .tangents;
    return {-linear_solve(jacobian_op(spec->G), rhs, q, solve_options(*spec, false))};
  }
};

Tensor solve_implicit(std::shared_ptr<RootSpec> spec, const Tensor& x0,
                      const std::vector<Tensor>& params) {
  const char* op = spec->op;
  ADJOINT_CHECK(static_cast<bool>(spec->G), Value, op, "the function is empty");
  ADJOINT_CHECK(x0.defined() && is_floating(x0.dtype()), DType, op,
                "x0 must be a defined floating tensor, got ",
                x0.defined() ? describe(x0) : std::string("undefined"));
  detail::check_solver_precision(op, "x0", x0);
  for (std::size_t i = 0; i < params.size(); ++i)
    ADJOINT_CHECK(params[i].defined() && is_floating(params[i].dtype()), DType, op, "param ", i,
                  " must be a defined floating tensor, got ",
                  params[i].defined() ? describe(params[i]) : std::string("undefined"));
  detail::check_tolerance(op, "rtol", spec->options.rtol);
  detail::check_tolerance(op, "atol", spec->options.atol);
  detail::check_count(op, "max_iters", spec->options.max_iters, 0);
  // The linear solves of Newton's steps and of the derivatives: checked here, since Newton
  // reads a failed step as a singular Jacobian.
  detail::check_krylov_options(op, spec->options.linear.krylov, "linear.krylov.");
  // One custom function, with or without params to differentiate: under compile it is then
  // one node whose checks of values (x0 finite, convergence) run at every replay.
  // x0 as it is (its gradient is none: the backward returns an undefined one for it).
  return ImplicitRootFn::apply(x0, params, std::shared_ptr<const RootSpec>(std::move(spec)));
}

}  // namespace

Tensor fixed_point(const ImplicitFn& f, const Tensor& x0, const std::vector<Tensor>& params,
                   const ImplicitOptions& options) {
  ADJOINT_CHECK(static_cast<bool>(f), Value, "fixed_point", "the function is empty");
  auto spec = std::make_shared<RootSpec>();
  spec->op = "fixed_point";
  spec->f = f;
  spec->G = [f](const Tensor& x, const std::vector<Tensor>& p) { return x - f(x, p); };
  spec->options = options;
  return solve_implicit(std::move(spec), x0, params);
}

Tensor root(const ImplicitFn& g, const Tensor& x0, const std::vector<Tensor>& params,
            const ImplicitOptions& options) {
  auto spec = std::make_shared<RootSpec>();
  spec->op = "root";
  spec->G = g;
  spec->options = options;
  return solve_implicit(std::move(spec), x0, params);
}

}  // namespace adjoint
