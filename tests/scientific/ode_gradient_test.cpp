// odeint's gradients three ways (backprop, adjoint, checkpointed) against each other and
// against central finite differences of a tightly solved loss; memory that does not grow with
// the step count for the adjoint; forward mode through backprop; and odeint's errors.
#include <gtest/gtest.h>

#include <cmath>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {

// A damped, driven oscillator with parameters p = [ω, γ] (the damping and frequency) and a
// matrix coupling W: y = (x, v), x' = v, v' = -ω² x - γ v + 0.1 tanh(W y)₀.
Tensor field(double t, const Tensor& y, const std::vector<Tensor>& p) {
  Tensor x = y.select(0, 0), v = y.select(0, 1);
  Tensor w = p[0].select(0, 0), g = p[0].select(0, 1);
  Tensor drive = tanh(matmul(p[1], y.unsqueeze(1)).squeeze(1)) * 0.1;
  return stack({v, -w * w * x - g * v + drive.select(0, 0) + std::sin(t) * 0.2}, 0) + drive * 0.05;
}

const Tensor kY0 = tensor({1.0, -0.3}, DType::Float64);
const Tensor kP = tensor({1.7, 0.4}, DType::Float64);
const Tensor kW = tensor({0.3, -0.5, 0.8, 0.2}, {2, 2}, DType::Float64);
const Tensor kT = tensor({0.0, 0.5, 1.2, 2.0}, DType::Float64);
const Tensor kWeights = tensor({0.3, -1.0, 0.7, 0.2, -0.4, 1.1, 0.5, 0.9}, {4, 2}, DType::Float64);

// A loss over every output time, so the adjoint's jumps at each t_i are exercised.
Tensor loss(const Tensor& ys) { return (kWeights * ys * ys).sum() + (kWeights * ys).sum(); }

OdeOptions opts(OdeMethod m, OdeGradient g) {
  OdeOptions o;
  o.method = m;
  o.gradient = g;
  o.step_size = m == OdeMethod::RK4 ? 0.01 : 0;
  o.rtol = 1e-10;
  o.atol = 1e-12;
  o.snapshots = 4;
  return o;
}

std::vector<Tensor> grads(const OdeOptions& o) {
  return grad(
      [&](const Tensor& y0, const Tensor& p, const Tensor& w) {
        return loss(odeint(field, y0, kT, {p, w}, o));
      },
      {0, 1, 2})(kY0, kP, kW);
}

// Central differences of the loss solved at rtol 1e-12, element by element.
std::vector<Tensor> finite_differences() {
  OdeOptions o = opts(OdeMethod::Dopri5, OdeGradient::Backprop);
  o.rtol = 1e-12;
  o.atol = 1e-14;
  std::vector<Tensor> xs{kY0, kP, kW}, out;
  for (std::size_t a = 0; a < xs.size(); ++a) {
    std::vector<double> g;
    const std::vector<double> base = xs[a].to_vector<double>();
    for (std::size_t i = 0; i < base.size(); ++i) {
      const double h = 1e-5;
      auto at = [&](double d) {
        std::vector<double> v = base;
        v[i] += d;
        std::vector<Tensor> ys = xs;
        ys[a] = tensor(v, xs[a].shape());
        return loss(odeint(field, ys[0], kT, {ys[1], ys[2]}, o)).item<double>();
      };
      g.push_back((at(h) - at(-h)) / (2 * h));
    }
    out.push_back(tensor(g, xs[a].shape()));
  }
  return out;
}

double max_diff(const Tensor& a, const Tensor& b) { return abs(a - b).max().item<double>(); }

TEST(OdeGradient, ThreeMethodsAgreeWithEachOtherAndFiniteDifferences) {
  const std::vector<Tensor> fd = finite_differences();
  const auto rk4_backprop = grads(opts(OdeMethod::RK4, OdeGradient::Backprop));
  const auto rk4_adjoint = grads(opts(OdeMethod::RK4, OdeGradient::Adjoint));
  const auto rk4_checkpoint = grads(opts(OdeMethod::RK4, OdeGradient::Checkpoint));
  const auto dp_backprop = grads(opts(OdeMethod::Dopri5, OdeGradient::Backprop));
  const auto dp_adjoint = grads(opts(OdeMethod::Dopri5, OdeGradient::Adjoint));
  for (int a = 0; a < 3; ++a) {
    SCOPED_TRACE("argument " + std::to_string(a));
    // Checkpointing replays exactly the steps backprop records.
    EXPECT_LT(max_diff(rk4_checkpoint[a], rk4_backprop[a]), 1e-12);
    // The adjoint ODE discretised by RK4 agrees with the discrete gradient to O(h⁴).
    EXPECT_LT(max_diff(rk4_adjoint[a], rk4_backprop[a]), 1e-7);
    // Every method against finite differences of the exact solution.
    for (const auto* g : {&rk4_backprop, &rk4_adjoint, &rk4_checkpoint, &dp_backprop, &dp_adjoint})
      EXPECT_LT(max_diff((*g)[a], fd[a]), 1e-6);
  }
}

TEST(OdeGradient, OneTimeIsTheIdentity) {
  // t = [t0]: the output is y0 itself, so every method's gradient is the loss's own.
  const Tensor t0 = tensor({0.3}, DType::Float64);
  for (OdeGradient g : {OdeGradient::Backprop, OdeGradient::Adjoint, OdeGradient::Checkpoint}) {
    Tensor y0 = kY0.clone().requires_grad_(true), p = kP.clone().requires_grad_(true);
    Tensor ys = odeint(field, y0, t0, {p, kW}, opts(OdeMethod::RK4, g));
    ASSERT_EQ(ys.shape(), Shape({1, 2}));
    (ys * ys).sum().backward();
    EXPECT_LT(max_diff(y0.grad(), kY0 * 2.0), 1e-15);
    EXPECT_TRUE(!p.grad().defined() || abs(p.grad()).max().item<double>() == 0.0);
  }
}

TEST(OdeGradient, AdjointMemoryDoesNotGrowWithSteps) {
  auto peak = [](OdeGradient g, double h) {
    OdeOptions o = opts(OdeMethod::RK4, g);
    o.step_size = h;
    SavedMemoryTracker tracker;
    reset_peak_saved_memory_stats();
    Tensor p = kP.clone().requires_grad_(true);
    loss(odeint(field, kY0, kT, {p, kW}, o)).backward();
    return static_cast<double>(saved_memory_stats().peak_bytes);
  };
  const double adj_few = peak(OdeGradient::Adjoint, 0.02),
               adj_many = peak(OdeGradient::Adjoint, 0.002);
  const double bp_few = peak(OdeGradient::Backprop, 0.02),
               bp_many = peak(OdeGradient::Backprop, 0.002);
  EXPECT_LT(adj_many, 1.5 * adj_few);
  EXPECT_GT(bp_many, 5 * bp_few);
  EXPECT_LT(adj_many * 20, bp_many);
}

TEST(OdeGradient, AdjointStatsCountTheBackwardSolve) {
  OdeOptions o = opts(OdeMethod::Dopri5, OdeGradient::Adjoint);
  o.stats = std::make_shared<OdeStats>();
  Tensor p = kP.clone().requires_grad_(true);
  Tensor ys = odeint(field, kY0, kT, {p, kW}, o);
  EXPECT_GT(o.stats->steps, 0);
  EXPECT_EQ(o.stats->backward_steps, 0);
  loss(ys).backward();
  EXPECT_GT(o.stats->backward_steps, 0);
  EXPECT_GT(o.stats->backward_evals, 6 * o.stats->backward_steps);
}

TEST(OdeGradient, BackpropSupportsForwardModeAndSecondOrder) {
  const Tensor tp = tensor({0.3, -0.2}, DType::Float64);
  auto f = [](const Tensor& p) {
    return loss(odeint(field, kY0, kT, {p, kW}, opts(OdeMethod::RK4, OdeGradient::Backprop)));
  };
  const double h = 1e-5;
  const double fd = (f(kP + tp * h).item<double>() - f(kP - tp * h).item<double>()) / (2 * h);
  EXPECT_NEAR(jvp(f, kP, tp).tangents.item<double>(), fd, 1e-7);
  const Tensor hv = hvp(f, kP, tp);
  const Tensor fd_hv = (grad(f)(kP + tp * h) - grad(f)(kP - tp * h)) / (2 * h);
  EXPECT_LT(max_diff(hv, fd_hv), 1e-6);
}

TEST(OdeGradient, AdjointUnderForwardModeAndSecondOrder) {
  const OdeOptions o = opts(OdeMethod::RK4, OdeGradient::Adjoint);
  auto f = [&](const Tensor& p) { return loss(odeint(field, kY0, kT, {p, kW}, o)); };
  auto f_bp = [&](const Tensor& p) {
    return loss(odeint(field, kY0, kT, {p, kW}, opts(OdeMethod::RK4, OdeGradient::Backprop)));
  };
  // jvp alone asks for no reverse gradient: the solve carries tangents through its steps.
  EXPECT_NEAR(jvp(f, kP, kP).tangents.item<double>(), jvp(f_bp, kP, kP).tangents.item<double>(),
              1e-12);
  // A gradient with tangents, or of a gradient, would need the adjoint's own derivatives.
  expect_error([&] { hvp(f, kP, kP); }, ErrorKind::NotImplemented, {"odeint_adjoint", "jvp"});
  expect_error([&] { hvp(f, kP, kP, HvpMode::ReverseOverReverse); }, ErrorKind::NotImplemented,
               {"[odeint]", "double backward"});
}

TEST(OdeGradient, AdjointRefusesCapturedTensorsThatNeedGradients) {
  Tensor k = scalar_tensor(0.5, DType::Float64).requires_grad_(true);
  auto captured = [&](double, const Tensor& y, const std::vector<Tensor>&) { return -k * y; };
  Tensor y0 = kY0.clone().requires_grad_(true);
  Tensor ys = odeint(captured, y0, kT, {}, opts(OdeMethod::RK4, OdeGradient::Adjoint));
  expect_error([&] { ys.sum().backward(); }, ErrorKind::Autograd,
               {"[odeint]", "not in params", "y [2] (float64)"});
}

TEST(OdeGradient, Errors) {
  const Tensor p = kP;
  auto run = [&](const Tensor& y0, const Tensor& t, const OdeOptions& o,
                 std::vector<Tensor> params = {}) {
    if (params.empty()) params = {p, kW};
    odeint(field, y0, t, params, o);
  };
  const OdeOptions dp = opts(OdeMethod::Dopri5, OdeGradient::Backprop);
  expect_error(
      [&] {
        run(kY0, tensor({0.0, 1.0, 1.0}, DType::Float64), dp);
      },
      ErrorKind::Value,
      {"[odeint]", "strictly increasing", "t[2]", "t [3] (float64)", "y0 [2] (float64)"});
  expect_error(
      [&] {
        run(kY0, tensor({1.0, 0.0}, DType::Float64), dp);
      },
      ErrorKind::Value, {"[odeint]", "strictly increasing"});
  expect_error(
      [&] {
        run(kY0, zeros({2, 2}, DType::Float64), dp);
      },
      ErrorKind::Shape, {"[odeint]", "1-D", "[2, 2] (float64)"});
  expect_error([&] { run(arange(2), kT, dp); }, ErrorKind::DType, {"[odeint]", "y0", "int64"});
  expect_error(
      [&] {
        run(kY0, kT, dp, {p, arange(4).reshape({2, 2})});
      },
      ErrorKind::DType, {"[odeint]", "param 1", "[2, 2] (int64)"});
  expect_error(
      [&] {
        odeint([](double, const Tensor& y, const std::vector<Tensor>&) { return y.sum(); }, kY0, kT,
               {}, dp);
      },
      ErrorKind::Shape, {"[odeint]", "shaped like y [2] (float64)", "[] (float64)"});
  OdeOptions rk4 = opts(OdeMethod::RK4, OdeGradient::Backprop);
  rk4.step_size = 0;
  expect_error([&] { run(kY0, kT, rk4); }, ErrorKind::Value, {"[odeint]", "RK4", "step_size"});
  expect_error([&] { run(kY0, kT, opts(OdeMethod::Dopri5, OdeGradient::Checkpoint)); },
               ErrorKind::Value, {"[odeint]", "Checkpoint", "RK4"});
  // A stiff problem with too few steps allowed: non-convergence names the problem.
  OdeOptions few = dp;
  few.max_steps = 20;
  expect_error(
      [&] {
        odeint([](double, const Tensor& y, const std::vector<Tensor>&) { return y * -1e6; }, kY0,
               kT, {}, few);
      },
      ErrorKind::Value, {"[odeint]", "max_steps=20", "y0 [2] (float64)"});
}

}  // namespace
