// linear_solve: A(params) x = b for a matrix-free operator, as a custom function whose VJP and
// JVP are linear solves again (with Aᵀ and A), written with transforms, so derivatives of any
// order work without unrolling the Krylov iteration (JAX's custom_linear_solve).
#include <any>
#include <memory>

#include "adjoint/autograd.h"
#include "adjoint/error.h"
#include "adjoint/implicit.h"
#include "adjoint/ops.h"
#include "adjoint/transforms.h"
#include "scientific/precision.h"
#include "scientific/solution_list.h"
#include "scientific/solver_args.h"

namespace adjoint {
namespace {

constexpr const char* kOp = "linear_solve";

struct SolveSpec {
  LinearOperator A;
  LinearSolveOptions options;
};

// Aᵀ: given, A itself when symmetric, else the vjp of u -> A u (at zero: A is linear, so the
// point does not matter). The vjp keeps params on the graph when they need gradients, so the
// transpose is differentiable in them too.
LinearOperator transpose_of(const SolveSpec& s) {
  if (s.options.symmetric || s.options.method == KrylovMethod::CG) return s.A;
  if (s.options.transpose) return s.options.transpose;
  return [A = s.A](const Tensor& u, const std::vector<Tensor>& p) {
    return vjp([&](const Tensor& v) { return A(v, p); }, zeros_like(u)).pullback(u);
  };
}

struct LinearSolveFn : Function<LinearSolveFn> {
  static std::string name() { return kOp; }

  static Tensor forward(FunctionCtx& ctx, const Tensor& b, const std::vector<Tensor>& params,
                        const std::shared_ptr<const SolveSpec>& spec) {
    const MatVec mv = spec->options.bind ? spec->options.bind(params)
                                         : [&](const Tensor& u) { return spec->A(u, params); };
    Tensor x = spec->options.method == KrylovMethod::CG ? cg(mv, b, spec->options.krylov)
                                                        : gmres(mv, b, spec->options.krylov);
    ctx.save_for_backward(detail::with_solution(x, params));
    ctx.saved_data["spec"] = spec;
    return x;
  }

  // x = A⁻¹ b: λ = A⁻ᵀ x̄, b̄ = λ, p̄ = -(∂(A x)/∂p)ᵀ λ
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    auto spec = std::any_cast<std::shared_ptr<const SolveSpec>>(ctx.saved_data.at("spec"));
    std::vector<Tensor> saved = ctx.get_saved();
    const Tensor x = saved[0];
    const std::vector<Tensor> params = detail::params_of(saved);
    LinearSolveOptions transposed = spec->options;
    transposed.transpose = spec->A;  // (Aᵀ)ᵀ = A, so a second backward needs no vjp of a vjp
    transposed.bind = spec->options.bind_transpose;
    transposed.bind_transpose = spec->options.bind;
    const Tensor lambda = linear_solve(transpose_of(*spec), g[0], params, transposed);
    std::vector<Tensor> out{ctx.needs_input_grad(0) ? lambda : Tensor()};
    bool any_param = false;
    for (std::size_t i = 0; i < params.size(); ++i) any_param |= ctx.needs_input_grad(1 + i);
    if (!any_param) {
      out.resize(1 + params.size());
      return out;
    }
    auto r = vjp([&](const std::vector<Tensor>& p) { return spec->A(x, p); }, params);
    std::vector<Tensor> gp = r.pullback(lambda);
    for (std::size_t i = 0; i < params.size(); ++i)
      out.push_back(ctx.needs_input_grad(1 + i) ? -gp[i] : Tensor());
    return out;
  }

  // A ẋ + (∂(A x)/∂p) ṗ = ḃ
  static std::vector<Tensor> jvp(FunctionCtx& ctx, std::vector<Tensor> t) {
    auto spec = std::any_cast<std::shared_ptr<const SolveSpec>>(ctx.saved_data.at("spec"));
    std::vector<Tensor> saved = ctx.get_saved();
    const Tensor x = saved[0];
    const std::vector<Tensor> params = detail::params_of(saved);
    Tensor rhs = t[0].defined() ? t[0] : zeros_like(x);
    if (!params.empty()) {
      std::vector<Tensor> tp(t.begin() + 1, t.end());
      for (std::size_t i = 0; i < tp.size(); ++i)
        if (!tp[i].defined()) tp[i] = zeros_like(params[i]);
      rhs = rhs -
            adjoint::jvp([&](const std::vector<Tensor>& p) { return spec->A(x, p); }, params, tp)
                .tangents;
    }
    return {linear_solve(spec->A, rhs, params, spec->options)};
  }
};

}  // namespace

Tensor linear_solve(const LinearOperator& A, const Tensor& b, const std::vector<Tensor>& params,
                    const LinearSolveOptions& options) {
  ADJOINT_CHECK(static_cast<bool>(A), Value, kOp, "the operator is empty");
  ADJOINT_CHECK(b.defined() && is_floating(b.dtype()), DType, kOp,
                "b must be a defined floating tensor, got ",
                b.defined() ? describe(b) : std::string("undefined"));
  detail::check_solver_precision(kOp, "b", b);
  for (std::size_t i = 0; i < params.size(); ++i)
    ADJOINT_CHECK(params[i].defined() && is_floating(params[i].dtype()), DType, kOp, "param ", i,
                  " must be a defined floating tensor, got ",
                  params[i].defined() ? describe(params[i]) : std::string("undefined"));
  detail::check_krylov_options(kOp, options.krylov, "krylov.");
  auto spec = std::make_shared<const SolveSpec>(SolveSpec{A, options});
  return LinearSolveFn::apply(b, params, spec);
}

}  // namespace adjoint
