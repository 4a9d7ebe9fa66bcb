// adjoint-heat-inverse: inverse heat conduction. A 2-D plate (N x N interior points, zero
// temperature on the boundary) is heated by an unknown source s(x, y); the heat equation
// u_t = κ Δu + s is stepped by implicit Euler, (I - dt κ Δ) u⁺ = u + dt s, each step one
// matrix-free conjugate-gradient solve (adjoint::linear_solve, so its gradient is one more CG
// solve with the transposed operator rather than a backward pass through CG's iterations).
// Gradient descent (Adam) on s recovers the source from noisy temperatures at the final time.
// The first gradient is checked against central finite differences.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "adjoint/adjoint.h"
#include "adjoint/optim.h"

using adjoint::Tensor;

namespace {

constexpr int64_t kN = 16;       // interior points per side
constexpr int kSteps = 10;       // implicit Euler steps
constexpr double kDt = 0.01;     // time step
constexpr double kKappa = 0.02;  // conductivity
constexpr double kDx = 1.0 / (kN + 1);
// Weight of the smoothness penalty: the best of 1e-8 ... 1e-5 for this noise level.
constexpr double kSmooth = 1e-6;

// The 5-point Laplacian with zero (Dirichlet) boundary, written with shifts: each neighbour is
// the grid moved by one with a zero row or column coming in.
Tensor laplacian(const Tensor& u) {
  const Tensor zr = adjoint::zeros({1, kN}, adjoint::DType::Float64);
  const Tensor zc = adjoint::zeros({kN, 1}, adjoint::DType::Float64);
  Tensor up = adjoint::cat({zr, u.slice(0, 0, kN - 1)}, 0);
  Tensor down = adjoint::cat({u.slice(0, 1, kN), zr}, 0);
  Tensor left = adjoint::cat({zc, u.slice(1, 0, kN - 1)}, 1);
  Tensor right = adjoint::cat({u.slice(1, 1, kN), zc}, 1);
  return (up + down + left + right - u * 4.0) / (kDx * kDx);
}

// The final temperature from a cold plate under source s.
Tensor simulate(const Tensor& s) {
  adjoint::LinearSolveOptions o;
  o.method = adjoint::KrylovMethod::CG;  // I - dt κ Δ is symmetric positive definite
  o.krylov.rtol = 1e-12;
  const adjoint::LinearOperator implicit_euler = [](const Tensor& v, const std::vector<Tensor>&) {
    return v - laplacian(v) * (kDt * kKappa);
  };
  Tensor u = adjoint::zeros({kN, kN}, adjoint::DType::Float64);
  for (int i = 0; i < kSteps; ++i) u = adjoint::linear_solve(implicit_euler, u + s * kDt, {}, o);
  return u;
}

// A smooth two-blob source: what the inversion should find.
Tensor true_source() {
  std::vector<double> v;
  for (int64_t i = 0; i < kN; ++i)
    for (int64_t j = 0; j < kN; ++j) {
      const double x = (i + 1) * kDx, y = (j + 1) * kDx;
      v.push_back(50 * std::exp(-((x - 0.3) * (x - 0.3) + (y - 0.35) * (y - 0.35)) / 0.02) +
                  30 * std::exp(-((x - 0.7) * (x - 0.7) + (y - 0.6) * (y - 0.6)) / 0.03));
    }
  return adjoint::tensor(v, adjoint::Shape{kN, kN});
}

double rel(const Tensor& a, const Tensor& b) {
  return adjoint::norm(a - b).item<double>() / adjoint::norm(b).item<double>();
}

}  // namespace

int main() {
  const auto start = std::chrono::steady_clock::now();
  const Tensor s_true = true_source();
  // Final temperatures measured with noise of 1% of their peak.
  adjoint::Generator gen(7);
  const Tensor clean = simulate(s_true);
  const Tensor observed = clean + adjoint::randn({kN, kN}, adjoint::DType::Float64, &gen) *
                                      (0.01 * clean.max().item<double>());
  // Misfit of the final temperatures plus a small smoothness penalty |∇s|² (the inverse
  // problem damps high frequencies, which the data alone cannot pin down).
  auto loss_of = [&](const Tensor& s) {
    Tensor misfit = (simulate(s) - observed).square().sum();
    Tensor smooth = -(s * laplacian(s)).sum() * kSmooth;
    return misfit + smooth;
  };

  Tensor s = adjoint::zeros({kN, kN}, adjoint::DType::Float64).requires_grad_(true);
  {  // the gradient through the solves against finite differences, at two points
    const Tensor g = adjoint::grad(loss_of)(s.detach());
    for (int64_t k : {17, 77}) {
      const double h = 1e-3;
      std::vector<double> unit(kN * kN, 0.0);
      unit[k] = 1;
      const Tensor e = adjoint::tensor(unit, adjoint::Shape{kN, kN});
      const double fd = (loss_of(s.detach() + e * h).item<double>() -
                         loss_of(s.detach() - e * h).item<double>()) /
                        (2 * h);
      std::printf("gradient check at %lld: adjoint %.8e, finite differences %.8e\n",
                  static_cast<long long>(k), g.flatten().select(0, k).item<double>(), fd);
    }
  }

  adjoint::optim::AdamOptions ao;
  ao.lr = 2.0;
  adjoint::optim::Adam opt({s}, ao);
  for (int it = 0; it <= 300; ++it) {
    opt.zero_grad();
    Tensor loss = loss_of(s);
    loss.backward();
    opt.step();
    if (it % 50 == 0)
      std::printf("iter %3d  loss %.3e  temperature misfit %.2e  source error %.3f\n", it,
                  loss.item<double>(), rel(simulate(s.detach()), observed),
                  rel(s.detach(), s_true));
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("recovered the source to %.1f%% (relative L2) from final temperatures, %.1f s\n",
              100 * rel(s.detach(), s_true), secs);
  return 0;
}
