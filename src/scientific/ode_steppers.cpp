// RK4 and Dormand-Prince 5(4) over lists of tensors. Stage values are built with ops, so a
// solve under grad mode records every accepted step (backprop); step-size control reads only
// detached values, as torchdiffeq does: the step sizes are not differentiated.
#include "scientific/ode_steppers.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "scientific/per_example.h"

namespace adjoint::ode_detail {
namespace {

State eval(const Field& f, double t, const State& y, Counts& n) {
  ++n.evals;
  return f(t, y);
}

// y + h Σ c_i k_i, tensor by tensor; zero coefficients are skipped.
State combine(const State& y, double h, std::initializer_list<std::pair<double, const State*>> ks) {
  State out;
  out.reserve(y.size());
  for (std::size_t j = 0; j < y.size(); ++j) {
    Tensor acc;
    for (const auto& [c, k] : ks) {
      if (c == 0) continue;
      Tensor term = (*k)[j] * (c * h);
      acc = acc.defined() ? acc + term : term;
    }
    out.push_back(acc.defined() ? y[j] + acc : y[j]);
  }
  return out;
}

int64_t numel_all(const State& y) {
  int64_t n = 0;
  for (const Tensor& t : y) n += t.numel();
  return n;
}

// sqrt(mean((v / (atol + rtol max(|a|, |b|)))²)) over every element: Hairer's error norm.
// Each tensor's 2-norm is overflow-safe (Note [Overflow-safe norms] in per_example.h), and so
// is their combination: a step whose error is merely huge is rejected, not taken for a
// non-finite solution.
double scaled_rms(const State& v, const State& a, const State& b, double rtol, double atol) {
  NoGradGuard no_grad;
  NoForwardGradGuard no_forward;
  std::vector<double> norms;
  double largest = 0;
  for (std::size_t j = 0; j < v.size(); ++j) {
    Tensor scale = maximum(abs(a[j].detach()), abs(b[j].detach())) * rtol + atol;
    const double nj = detail::norm_of(v[j].detach() / scale).item<double>();
    if (!std::isfinite(nj)) return nj;
    norms.push_back(nj);
    largest = std::max(largest, nj);
  }
  const int64_t n = numel_all(v);
  if (n == 0 || largest == 0) return 0.0;
  double sq = 0;
  for (double nj : norms) sq += (nj / largest) * (nj / largest);
  return largest * std::sqrt(sq / static_cast<double>(n));
}

// Hairer, Norsett and Wanner, Solving ODEs I, II.4: a first step from the sizes of y and f.
double initial_step(const Field& f, double t0, const State& y0, const State& f0, double dir,
                    const Dopri5Control& c, Counts& n) {
  NoGradGuard no_grad;
  const double d0 = scaled_rms(y0, y0, y0, c.rtol, c.atol);
  const double d1 = scaled_rms(f0, y0, y0, c.rtol, c.atol);
  const double h0 = (d0 < 1e-5 || d1 < 1e-5) ? 1e-6 : 0.01 * d0 / d1;
  State y1 = combine(y0, dir * h0, {{1.0, &f0}});
  State f1 = eval(f, t0 + dir * h0, y1, n);
  State df;
  for (std::size_t j = 0; j < f0.size(); ++j) df.push_back(f1[j].detach() - f0[j].detach());
  const double d2 = scaled_rms(df, y0, y0, c.rtol, c.atol) / h0;
  const double m = std::max(d1, d2);
  const double h1 = m <= 1e-15 ? std::max(1e-6, h0 * 1e-3) : std::pow(0.01 / m, 1.0 / 5.0);
  return std::min(100 * h0, h1);
}

// The Dormand-Prince tableau: nodes c, stages a, 5th-order weights b, error weights e = b - b*.
constexpr double c2 = 1.0 / 5, c3 = 3.0 / 10, c4 = 4.0 / 5, c5 = 8.0 / 9;
constexpr double a21 = 1.0 / 5;
constexpr double a31 = 3.0 / 40, a32 = 9.0 / 40;
constexpr double a41 = 44.0 / 45, a42 = -56.0 / 15, a43 = 32.0 / 9;
constexpr double a51 = 19372.0 / 6561, a52 = -25360.0 / 2187, a53 = 64448.0 / 6561,
                 a54 = -212.0 / 729;
constexpr double a61 = 9017.0 / 3168, a62 = -355.0 / 33, a63 = 46732.0 / 5247, a64 = 49.0 / 176,
                 a65 = -5103.0 / 18656;
constexpr double b1 = 35.0 / 384, b3 = 500.0 / 1113, b4 = 125.0 / 192, b5 = -2187.0 / 6784,
                 b6 = 11.0 / 84;
constexpr double e1 = 71.0 / 57600, e3 = -71.0 / 16695, e4 = 71.0 / 1920, e5 = -17253.0 / 339200,
                 e6 = 22.0 / 525, e7 = -1.0 / 40;

}  // namespace

int64_t rk4_substeps(double t0, double t1, double max_h) {
  // Range-checked before the cast: casting a double beyond int64 is undefined (step_size 1e-30
  // over [0, 1] asked for 1e30 steps and took one).
  const double n = std::ceil(std::abs(t1 - t0) / max_h - 1e-9);
  ADJOINT_CHECK(max_h > 0 && std::isfinite(n) && n <= static_cast<double>(kMaxRk4Steps), Value,
                "odeint", "RK4 with step_size=", max_h, " would take ", n, " steps between t=", t0,
                " and t=", t1, ", more than the ", kMaxRk4Steps,
                " (2^40) allowed per output interval: raise step_size");
  return std::max<int64_t>(1, static_cast<int64_t>(n));
}

void check_finite_state(const State& y, double t0, double t1, const char* method) {
  NoGradGuard no_grad;
  NoForwardGradGuard no_forward;
  for (const Tensor& yj : y)
    ADJOINT_CHECK(detail::for_all(detail::all_finite(yj.detach())), Value, "odeint", "the ", method,
                  " solution became non-finite between t=", t0, " and t=", t1, " (state ",
                  describe(yj),
                  "): the problem blows up there, or the step is "
                  "too large for it");
}

State rk4_step(const Field& f, double t, const State& y, double h, Counts& n) {
  const State k1 = eval(f, t, y, n);
  const State k2 = eval(f, t + h / 2, combine(y, h, {{0.5, &k1}}), n);
  const State k3 = eval(f, t + h / 2, combine(y, h, {{0.5, &k2}}), n);
  const State k4 = eval(f, t + h, combine(y, h, {{1.0, &k3}}), n);
  ++n.steps;
  return combine(y, h, {{1.0 / 6, &k1}, {1.0 / 3, &k2}, {1.0 / 3, &k3}, {1.0 / 6, &k4}});
}

State rk4(const Field& f, State y, double t0, double t1, double max_h, Counts& n) {
  const int64_t steps = rk4_substeps(t0, t1, max_h);
  const double h = (t1 - t0) / static_cast<double>(steps);
  for (int64_t i = 0; i < steps; ++i) y = rk4_step(f, t0 + static_cast<double>(i) * h, y, h, n);
  check_finite_state(y, t0, t1, "RK4");
  return y;
}

State dopri5(const Field& f, State y, double t0, double t1, Dopri5Control& c, Counts& n,
             const char* op) {
  if (t1 == t0) return y;
  const double dir = t1 > t0 ? 1.0 : -1.0;
  State k1 = eval(f, t0, y, n);
  if (c.h <= 0) c.h = initial_step(f, t0, y, k1, dir, c, n);
  // y is finite (odeint checks y0; each accepted step is checked below), so a non-finite first
  // step comes from f: named here rather than as an underflowed step.
  ADJOINT_CHECK(std::isfinite(c.h), Value, op, "the vector field is not finite at t=", t0,
                " (the first step size came out ", c.h, ") for ", c.what);
  double t = t0;
  const int64_t start = n.steps + n.rejected;
  while (dir * (t1 - t) > 0) {
    ADJOINT_CHECK(n.steps + n.rejected - start < c.max_steps, Value, op,
                  "Dopri5 took max_steps=", c.max_steps, " steps between t=", t0, " and t=", t1,
                  " and stopped at t=", t, " (step ", c.h,
                  "): raise max_steps or loosen rtol=", c.rtol, "/atol=", c.atol, " for ", c.what);
    ADJOINT_CHECK(c.h > 1e-14 * std::max(1.0, std::abs(t)), Value, op,
                  "Dopri5's step size underflowed to ", c.h, " at t=", t,
                  " (a stiff or singular problem?) for ", c.what);
    // The last step is cut to land on t1; the proposal survives for the next interval.
    const bool cut = c.h >= std::abs(t1 - t);
    const double h = cut ? t1 - t : dir * c.h;
    const State k2 = eval(f, t + c2 * h, combine(y, h, {{a21, &k1}}), n);
    const State k3 = eval(f, t + c3 * h, combine(y, h, {{a31, &k1}, {a32, &k2}}), n);
    const State k4 = eval(f, t + c4 * h, combine(y, h, {{a41, &k1}, {a42, &k2}, {a43, &k3}}), n);
    const State k5 =
        eval(f, t + c5 * h, combine(y, h, {{a51, &k1}, {a52, &k2}, {a53, &k3}, {a54, &k4}}), n);
    const State k6 = eval(
        f, t + h, combine(y, h, {{a61, &k1}, {a62, &k2}, {a63, &k3}, {a64, &k4}, {a65, &k5}}), n);
    State y_new = combine(y, h, {{b1, &k1}, {b3, &k3}, {b4, &k4}, {b5, &k5}, {b6, &k6}});
    const State k7 = eval(f, t + h, y_new, n);  // first stage of the next step (FSAL)
    State err;
    {
      NoGradGuard no_grad;
      NoForwardGradGuard no_forward;
      State zero;
      for (const Tensor& yj : y) zero.push_back(zeros_like(yj.detach()));
      err = combine(zero, h, {{e1, &k1}, {e3, &k3}, {e4, &k4}, {e5, &k5}, {e6, &k6}, {e7, &k7}});
    }
    const double norm = scaled_rms(err, y, y_new, c.rtol, c.atol);
    ADJOINT_CHECK(std::isfinite(norm), Value, op, "the solution became non-finite at t=", t,
                  " for ", c.what);
    // The standard controller: the error scales as h⁵.
    const double factor = norm == 0 ? 10.0 : 0.9 * std::pow(norm, -1.0 / 5.0);
    if (norm <= 1) {
      t = cut ? t1 : t + h;
      y = std::move(y_new);
      k1 = k7;
      ++n.steps;
      const double next = std::abs(h) * std::clamp(factor, 0.2, 10.0);
      c.h = cut ? std::max(c.h, next) : next;
    } else {
      ++n.rejected;
      c.h = std::abs(h) * std::clamp(factor, 0.2, 1.0);
    }
  }
  return y;
}

}  // namespace adjoint::ode_detail
