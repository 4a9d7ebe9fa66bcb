// odeint's values against problems with known solutions: exponential decay, the harmonic
// oscillator and a time-dependent field, for Dopri5 (the error meets the requested tolerance
// and shrinks with it) and RK4 (fourth-order convergence); shapes, dtypes and step counts.
#include <gtest/gtest.h>

#include <cmath>

#include "adjoint/adjoint.h"

using namespace adjoint;

namespace {

Tensor decay(double, const Tensor& y, const std::vector<Tensor>& p) { return -p[0] * y; }

// x' = v, v' = -ω² x: x = cos ωt, v = -ω sin ωt from (1, 0).
Tensor oscillator(double, const Tensor& y, const std::vector<Tensor>& p) {
  Tensor w2 = p[0] * p[0];
  return stack({y.select(0, 1), -w2 * y.select(0, 0)}, 0);
}

double max_rel_error(const Tensor& got, const Tensor& want) {
  return (abs(got - want) / (abs(want) + 1e-300)).max().item<double>();
}

TEST(Odeint, Dopri5DecayMeetsTolerance) {
  const Tensor y0 = tensor({1.0, -2.0, 0.5}, DType::Float64);
  const Tensor k = scalar_tensor(1.3, DType::Float64);
  const Tensor t = linspace(0, 3, 7, DType::Float64);
  const Tensor exact = exp(-k * t).unsqueeze(1) * y0.unsqueeze(0);
  double previous_error = 1;
  int64_t previous_steps = 0;
  for (double rtol : {1e-4, 1e-6, 1e-8, 1e-10}) {
    OdeOptions o;
    o.rtol = rtol;
    o.atol = rtol * 1e-3;
    o.stats = std::make_shared<OdeStats>();
    const Tensor ys = odeint(decay, y0, t, {k}, o);
    ASSERT_EQ(ys.shape(), Shape({7, 3}));
    const double err = max_rel_error(ys, exact);
    // Global error stays within a small multiple of the local tolerance, and falls with it.
    EXPECT_LT(err, 20 * rtol) << "rtol " << rtol;
    EXPECT_LT(err, previous_error);
    EXPECT_GT(o.stats->steps, previous_steps);
    previous_error = err;
    previous_steps = o.stats->steps;
  }
}

TEST(Odeint, Dopri5HarmonicOscillatorOverManyPeriods) {
  const double w = 2.0;
  const Tensor t = linspace(0, 10, 21, DType::Float64);
  OdeOptions o;
  o.rtol = 1e-9;
  o.atol = 1e-12;
  o.stats = std::make_shared<OdeStats>();
  const Tensor ys = odeint(oscillator, tensor({1.0, 0.0}, DType::Float64), t,
                           {scalar_tensor(w, DType::Float64)}, o);
  const std::vector<double> tv = t.to_vector<double>();
  const std::vector<double> got = ys.to_vector<double>();
  for (std::size_t i = 0; i < tv.size(); ++i) {
    EXPECT_NEAR(got[2 * i], std::cos(w * tv[i]), 1e-7) << "t " << tv[i];
    EXPECT_NEAR(got[2 * i + 1], -w * std::sin(w * tv[i]), 2e-7) << "t " << tv[i];
  }
  EXPECT_GT(o.stats->steps, 20);
  // Six stages a step (FSAL), one first stage per output interval, one for the first step.
  EXPECT_EQ(o.stats->evals, 6 * (o.stats->steps + o.stats->rejected) + 20 + 1);
}

TEST(Odeint, Rk4IsFourthOrder) {
  const Tensor y0 = tensor({1.0, 0.0}, DType::Float64);
  const Tensor w = scalar_tensor(1.5, DType::Float64);
  const Tensor t = tensor({0.0, 4.0}, DType::Float64);
  const double exact = std::cos(1.5 * 4.0);
  std::vector<double> errors;
  for (double h : {0.1, 0.05, 0.025}) {
    OdeOptions o;
    o.method = OdeMethod::RK4;
    o.step_size = h;
    errors.push_back(std::abs(
        odeint(oscillator, y0, t, {w}, o).select(0, 1).select(0, 0).item<double>() - exact));
  }
  for (std::size_t i = 1; i < errors.size(); ++i) {
    const double ratio = errors[i - 1] / errors[i];
    EXPECT_GT(ratio, 13);  // 2⁴ = 16 for a fourth-order method
    EXPECT_LT(ratio, 19);
  }
}

TEST(Odeint, TimeDependentFieldAndShapes) {
  // y' = cos(t) elementwise: y = y0 + sin(t), for a [2, 3] state.
  auto f = [](double tt, const Tensor& y, const std::vector<Tensor>&) {
    return full_like(y, std::cos(tt));
  };
  const Tensor y0 = arange(0, 6, 1, DType::Float64).reshape({2, 3});
  const Tensor t = tensor({0.5, 1.0, 2.5}, DType::Float64);
  for (OdeMethod m : {OdeMethod::RK4, OdeMethod::Dopri5}) {
    OdeOptions o;
    o.method = m;
    o.step_size = m == OdeMethod::RK4 ? 0.01 : 0;
    o.rtol = 1e-10;
    const Tensor ys = odeint(f, y0, t, {}, o);
    ASSERT_EQ(ys.shape(), Shape({3, 2, 3}));
    EXPECT_EQ(abs(ys.select(0, 0) - y0).max().item<double>(), 0.0);  // row 0 is y0
    for (int i = 0; i < 3; ++i) {
      const double ti = t.to_vector<double>()[i];
      const Tensor want = y0 + (std::sin(ti) - std::sin(0.5));
      EXPECT_LT(abs(ys.select(0, i) - want).max().item<double>(), 1e-8);
    }
  }
}

TEST(Odeint, Float32StaysFloat32) {
  const Tensor y0 = tensor({1.0, 2.0}, DType::Float32);
  const Tensor ys =
      odeint(decay, y0, tensor({0.0, 1.0}, DType::Float32), {scalar_tensor(1.0, DType::Float32)});
  EXPECT_EQ(ys.dtype(), DType::Float32);
  EXPECT_NEAR(ys.select(0, 1).select(0, 1).item<double>(), 2.0 * std::exp(-1.0), 1e-5);
}

}  // namespace
