// odeint: checks, then one of three ways to a differentiable solution: the solve run under
// grad mode (backprop), checkpoint_loop per output interval (RK4), or the adjoint custom
// function of ode_adjoint.cpp.
#include "adjoint/odeint.h"

#include <cmath>

#include "adjoint/checkpoint_loop.h"
#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "scientific/ode_adjoint.h"
#include "scientific/ode_steppers.h"
#include "scientific/per_example.h"
#include "scientific/precision.h"
#include "scientific/solver_args.h"

namespace adjoint {
namespace ode_detail {

std::string describe_problem(const Tensor& y0, const std::vector<Tensor>& params) {
  std::string s = "y0 " + describe(y0) + ", params [";
  for (std::size_t i = 0; i < params.size(); ++i) s += (i ? ", " : "") + describe(params[i]);
  return s + "]";
}

Field make_field(const VectorField& f, const std::vector<Tensor>& params, const char* op) {
  return [&f, params, op](double t, const State& y) -> State {
    Tensor dy = f(t, y[0], params);
    ADJOINT_CHECK(dy.defined() && dy.shape() == y[0].shape() && dy.dtype() == y[0].dtype(), Shape,
                  op, "the vector field must return a tensor shaped like y ", describe(y[0]),
                  " at t=", t, ", got ", dy.defined() ? describe(dy) : std::string("undefined"));
    return {dy};
  };
}

std::vector<Tensor> solve_plain(const VectorField& f, const Tensor& y0,
                                const std::vector<double>& times, const std::vector<Tensor>& params,
                                const OdeOptions& o, Counts& n) {
  const char* op = "odeint";
  Field field = make_field(f, params, op);
  Dopri5Control control{o.rtol, o.atol, o.max_steps,
                        o.method == OdeMethod::Dopri5 ? o.step_size : 0,
                        describe_problem(y0, params)};
  std::vector<Tensor> out{y0};
  State y{y0};
  for (std::size_t i = 1; i < times.size(); ++i) {
    y = o.method == OdeMethod::RK4 ? rk4(field, y, times[i - 1], times[i], o.step_size, n)
                                   : dopri5(field, y, times[i - 1], times[i], control, n, op);
    out.push_back(y[0]);
  }
  return out;
}

}  // namespace ode_detail

namespace {

using ode_detail::State;

std::vector<Tensor> solve_checkpointed(const VectorField& f, const Tensor& y0,
                                       const std::vector<double>& times,
                                       const std::vector<Tensor>& params, const OdeOptions& o,
                                       ode_detail::Counts& n) {
  std::vector<Tensor> out{y0};
  Tensor y = y0;
  for (std::size_t i = 1; i < times.size(); ++i) {
    const double t0 = times[i - 1];
    const int64_t steps = ode_detail::rk4_substeps(t0, times[i], o.step_size);
    const double h = (times[i] - t0) / static_cast<double>(steps);
    // The step reads the params checkpoint_loop hands it (detached copies in backward).
    // f is copied: backward runs the step after odeint has returned.
    LoopStep step = [f, t0, h](int64_t k, const State& s, const State& p) {
      ode_detail::Counts unused;
      return ode_detail::rk4_step(ode_detail::make_field(f, p, "odeint"),
                                  t0 + static_cast<double>(k) * h, s, h, unused);
    };
    y = checkpoint_loop(step, {y}, params, steps, o.snapshots)[0];
    ode_detail::check_finite_state({y}, t0, times[i], "RK4");
    n.steps += steps;
    n.evals += 4 * steps;
    out.push_back(y);
  }
  return out;
}

}  // namespace

Tensor odeint(const VectorField& f, const Tensor& y0, const Tensor& t,
              const std::vector<Tensor>& params, const OdeOptions& o) {
  const char* op = "odeint";
  ADJOINT_CHECK(static_cast<bool>(f), Value, op, "the vector field is empty");
  ADJOINT_CHECK(y0.defined() && is_floating(y0.dtype()), DType, op,
                "y0 must be a defined floating tensor, got ",
                y0.defined() ? describe(y0) : std::string("undefined"));
  detail::check_solver_precision(op, "y0", y0);
  for (std::size_t i = 0; i < params.size(); ++i)
    ADJOINT_CHECK(params[i].defined() && is_floating(params[i].dtype()), DType, op, "param ", i,
                  " must be a defined floating tensor, got ",
                  params[i].defined() ? describe(params[i]) : std::string("undefined"));
  ADJOINT_CHECK(t.defined() && t.dim() == 1 && t.numel() >= 1, Shape, op,
                "t must be a 1-D tensor of at least one time, got ",
                t.defined() ? describe(t) : std::string("undefined"), " (y0 ", describe(y0), ")");
  const std::vector<double> times = t.detach().to_vector<double>();
  for (std::size_t i = 0; i < times.size(); ++i) {
    ADJOINT_CHECK(std::isfinite(times[i]), Value, op, "t[", i, "] = ", times[i],
                  " is not finite (t ", describe(t), ")");
    ADJOINT_CHECK(i == 0 || times[i] > times[i - 1], Value, op,
                  "t must be strictly increasing, but t[", i, "] = ", times[i], " <= t[", i - 1,
                  "] = ", times[i - 1], " (t ", describe(t), ", y0 ", describe(y0), ")");
  }
  // y0 is checked here: a NaN or inf in it would otherwise surface steps later, as an
  // underflowed step size or a non-finite solution.
  ADJOINT_CHECK(detail::for_all(detail::all_finite(y0.detach())), Value, op,
                "y0 has non-finite entries (", ode_detail::describe_problem(y0, params), ")");
  detail::check_tolerance(op, "rtol", o.rtol);
  detail::check_tolerance(op, "atol", o.atol);
  ADJOINT_CHECK(o.method != OdeMethod::RK4 || (o.step_size > 0 && std::isfinite(o.step_size)),
                Value, op, "RK4 needs a positive, finite step_size, got ", o.step_size);
  if (o.method == OdeMethod::RK4) {  // each interval's step count, before any work
    for (std::size_t i = 1; i < times.size(); ++i)
      ode_detail::rk4_substeps(times[i - 1], times[i], o.step_size);
  }
  ADJOINT_CHECK(o.method != OdeMethod::Dopri5 || (o.step_size >= 0 && std::isfinite(o.step_size)),
                Value, op,
                "Dopri5's step_size (the first step; 0 chooses it) must be finite and >= 0, got ",
                o.step_size);
  ADJOINT_CHECK(o.method != OdeMethod::Dopri5 || (o.rtol + o.atol > 0 && o.max_steps > 0), Value,
                op, "Dopri5 needs rtol and atol not both 0 and max_steps > 0, got rtol=", o.rtol,
                ", atol=", o.atol, ", max_steps=", o.max_steps);
  ADJOINT_CHECK(o.gradient != OdeGradient::Checkpoint || o.method == OdeMethod::RK4, Value, op,
                "gradient=Checkpoint needs the fixed-step RK4 method (checkpoint_loop replays a "
                "fixed number of steps); use Backprop or Adjoint with Dopri5");
  ADJOINT_CHECK(o.gradient != OdeGradient::Checkpoint || o.snapshots >= 1, Value, op,
                "snapshots must be >= 1, got ", o.snapshots);

  bool needs_grad = y0.requires_grad();
  for (const Tensor& p : params) needs_grad |= p.requires_grad();
  needs_grad &= is_grad_enabled();

  ode_detail::Counts n;
  std::vector<Tensor> ys;
  if (needs_grad && o.gradient == OdeGradient::Adjoint) {
    return ode_detail::odeint_adjoint(f, y0, times, params, o);
  } else if (needs_grad && o.gradient == OdeGradient::Checkpoint) {
    ys = solve_checkpointed(f, y0, times, params, o, n);
  } else {
    ys = ode_detail::solve_plain(f, y0, times, params, o, n);
  }
  if (o.stats) *o.stats = OdeStats{n.steps, n.rejected, n.evals, 0, 0, 0};
  return stack(ys, 0);
}

}  // namespace adjoint
