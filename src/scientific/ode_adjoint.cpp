// The continuous adjoint method (Pontryagin; Chen et al. 2018, torchdiffeq's odeint_adjoint):
// forward solves without a graph and keeps only the outputs; backward solves, from the last
// time to the first, the augmented ODE
//   y' = f(t, y, p),   a' = -aᵀ ∂f/∂y,   p̄' = -aᵀ ∂f/∂p
// with a(t_N) = ȳ_N, adding ȳ_i to a at each output time t_i, so memory does not grow with
// the number of steps. Each right-hand side is one vector-Jacobian product of f.
#include <any>
#include <memory>

#include "adjoint/autograd.h"
#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "autograd/transform_support.h"
#include "scientific/ode_adjoint.h"
#include "scientific/solution_list.h"

namespace adjoint::ode_detail {
namespace {

struct AdjointSpec {
  VectorField f;  // a copy: backward runs after odeint returns
  std::vector<double> times;
  OdeOptions options;
};

// The augmented right-hand side over {y, a, p̄_0, ...}.
Field augmented(const AdjointSpec& s, const std::vector<Tensor>& params) {
  return [&s, params](double t, const State& z) -> State {
    EnableGradGuard grad_on;
    const uint64_t first_seq = detail::next_sequence_nr();
    Tensor y = z[0].detach().requires_grad_(true);
    std::vector<Tensor> inputs{y};
    for (const Tensor& p : params) inputs.push_back(p.detach().requires_grad_(true));
    const std::vector<Tensor> ps = detail::params_of(inputs);
    Tensor dy = s.f(t, y, ps);
    ADJOINT_CHECK(dy.defined() && dy.shape() == y.shape() && dy.dtype() == y.dtype(), Shape,
                  "odeint", "the vector field must return a tensor shaped like y ", describe(y),
                  " at t=", t, ", got ", dy.defined() ? describe(dy) : std::string("undefined"));
    // As checkpoint_loop does: a tensor f captures that needs a gradient would silently get
    // none, since only y and params are differentiated here.
    ADJOINT_CHECK(!detail::graph_reaches_outside({dy}, inputs, first_seq), Autograd, "odeint",
                  "the vector field reads a tensor that requires grad but is not in params; "
                  "gradient=Adjoint differentiates only y and params, so pass it in params (y ",
                  describe(y), ")");
    std::vector<Tensor> g;
    if (dy.requires_grad()) {
      g = autograd::grad({dy}, inputs, {z[1]}, /*retain_graph=*/false, /*create_graph=*/false,
                         /*allow_unused=*/true);
    } else {
      g.resize(inputs.size());
    }
    State out{dy.detach()};
    for (std::size_t i = 0; i < inputs.size(); ++i)
      out.push_back(g[i].defined() ? -g[i] : zeros_like(inputs[i]));
    return out;
  };
}

struct OdeAdjointFn : Function<OdeAdjointFn> {
  static std::string name() { return "odeint_adjoint"; }

  static Tensor forward(FunctionCtx& ctx, const Tensor& y0, const std::vector<Tensor>& params,
                        const std::shared_ptr<const AdjointSpec>& spec) {
    Counts n;
    Tensor ys = stack(solve_plain(spec->f, y0, spec->times, params, spec->options, n), 0);
    if (spec->options.stats) *spec->options.stats = OdeStats{n.steps, n.rejected, n.evals, 0, 0, 0};
    ctx.save_for_backward(detail::with_solution(ys, params));
    ctx.saved_data["spec"] = spec;
    return ys;
  }

  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> grads) {
    ADJOINT_CHECK(!is_grad_enabled(), NotImplemented, "odeint",
                  "double backward (create_graph) through gradient=Adjoint is not supported; "
                  "use gradient=Backprop for higher derivatives");
    auto spec = std::any_cast<std::shared_ptr<const AdjointSpec>>(ctx.saved_data.at("spec"));
    const AdjointSpec& s = *spec;
    const std::vector<Tensor> saved = ctx.get_saved();
    const Tensor ys = saved[0].detach();
    const std::vector<Tensor> params = detail::params_of(saved);
    const Tensor& g = grads[0];
    const std::size_t T = s.times.size();
    const Field field = augmented(s, params);
    Dopri5Control control{s.options.rtol, s.options.atol, s.options.max_steps, 0,
                          describe_problem(ys.select(0, 0), params) + " (adjoint solve)"};
    Counts n;
    State z{ys.select(0, T - 1), g.select(0, T - 1)};
    for (const Tensor& p : params) z.push_back(zeros_like(p));
    for (std::size_t i = T - 1; i >= 1; --i) {
      const double t1 = s.times[i], t0 = s.times[i - 1];
      z = s.options.method == OdeMethod::RK4 ? rk4(field, z, t1, t0, s.options.step_size, n)
                                             : dopri5(field, z, t1, t0, control, n, "odeint");
      // Restart y from the forward's value: solving y backward drifts (and diverges for
      // dissipative systems), the stored outputs are exact.
      z[0] = ys.select(0, i - 1);
      z[1] = z[1] + g.select(0, i - 1);
    }
    if (s.options.stats) {
      s.options.stats->backward_steps = n.steps;
      s.options.stats->backward_rejected = n.rejected;
      s.options.stats->backward_evals = n.evals;
    }
    std::vector<Tensor> out{ctx.needs_input_grad(0) ? z[1] : Tensor()};
    for (std::size_t i = 0; i < params.size(); ++i)
      out.push_back(ctx.needs_input_grad(1 + i) ? z[2 + i] : Tensor());
    return out;
  }
};

}  // namespace

Tensor odeint_adjoint(const VectorField& f, const Tensor& y0, const std::vector<double>& times,
                      const std::vector<Tensor>& params, const OdeOptions& o) {
  auto spec = std::make_shared<const AdjointSpec>(AdjointSpec{f, times, o});
  return OdeAdjointFn::apply(y0, params, spec);
}

}  // namespace adjoint::ode_detail
