// adjoint-ode-fit: parameter estimation of an ODE with the adjoint method. Lotka-Volterra
// predator-prey dynamics x' = αx - βxy, y' = δxy - γy are observed at 20 times with 3% noise;
// Adam on log(α, β, δ, γ) fits them, each gradient from odeint's continuous adjoint
// (a backward Dormand-Prince solve; memory independent of the number of steps). The first
// gradient is compared with backprop through the solver's steps.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "adjoint/adjoint.h"
#include "adjoint/optim.h"

using adjoint::Tensor;

namespace {

// p = log(α, β, δ, γ): logs keep the rates positive during the fit.
Tensor lotka_volterra(double, const Tensor& z, const std::vector<Tensor>& p) {
  const Tensor r = adjoint::exp(p[0]);
  const Tensor x = z.select(0, 0), y = z.select(0, 1);
  const Tensor a = r.select(0, 0), b = r.select(0, 1), d = r.select(0, 2), g = r.select(0, 3);
  return adjoint::stack({a * x - b * x * y, d * x * y - g * y}, 0);
}

}  // namespace

int main() {
  const auto start = std::chrono::steady_clock::now();
  using adjoint::DType;
  const Tensor z0 = adjoint::tensor({1.0, 1.0}, DType::Float64);
  const Tensor t = adjoint::linspace(0, 10, 20, DType::Float64);
  const std::vector<double> truth{1.5, 1.0, 1.0, 3.0};
  const Tensor log_true = adjoint::log(adjoint::tensor(truth, adjoint::Shape{4}));

  adjoint::OdeOptions o;
  o.rtol = 1e-6;
  o.atol = 1e-8;
  o.gradient = adjoint::OdeGradient::Adjoint;
  adjoint::Generator gen(3);
  const Tensor clean = adjoint::odeint(lotka_volterra, z0, t, {log_true}, o);
  const Tensor observed =
      clean * (1.0 + adjoint::randn(clean.shape(), DType::Float64, &gen) * 0.03);

  auto loss_of = [&](const Tensor& p, const adjoint::OdeOptions& opts) {
    return (adjoint::odeint(lotka_volterra, z0, t, {p}, opts) - observed).square().mean();
  };
  // Start 30-50% away from the truth.
  Tensor p =
      adjoint::log(adjoint::tensor({1.0, 0.7, 1.4, 2.0}, DType::Float64)).requires_grad_(true);
  {
    adjoint::OdeOptions bp = o;
    bp.gradient = adjoint::OdeGradient::Backprop;
    const Tensor g_adj = adjoint::grad([&](const Tensor& q) { return loss_of(q, o); })(p.detach());
    const Tensor g_bp = adjoint::grad([&](const Tensor& q) { return loss_of(q, bp); })(p.detach());
    const std::vector<double> a = g_adj.to_vector<double>(), b = g_bp.to_vector<double>();
    std::printf("first gradient, adjoint:  %+.8e %+.8e %+.8e %+.8e\n", a[0], a[1], a[2], a[3]);
    std::printf("first gradient, backprop: %+.8e %+.8e %+.8e %+.8e\n", b[0], b[1], b[2], b[3]);
  }
  adjoint::optim::AdamOptions ao;
  ao.lr = 0.05;
  adjoint::optim::Adam opt({p}, ao);
  for (int it = 0; it <= 200; ++it) {
    opt.zero_grad();
    Tensor loss = loss_of(p, o);
    loss.backward();
    opt.step();
    if (it % 25 == 0) {
      const std::vector<double> r = adjoint::exp(p.detach()).to_vector<double>();
      std::printf("iter %3d  loss %.4e  alpha %.3f beta %.3f delta %.3f gamma %.3f\n", it,
                  loss.item<double>(), r[0], r[1], r[2], r[3]);
    }
  }
  const std::vector<double> r = adjoint::exp(p.detach()).to_vector<double>();
  double worst = 0;
  for (int i = 0; i < 4; ++i) worst = std::max(worst, std::abs(r[i] / truth[i] - 1));
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "true (1.5, 1.0, 1.0, 3.0), fitted (%.3f, %.3f, %.3f, %.3f): worst relative "
      "error %.1f%%, %.1f s\n",
      r[0], r[1], r[2], r[3], 100 * worst, secs);
  return 0;
}
