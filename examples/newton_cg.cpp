// adjoint-newton-cg: minimises the n-dimensional Rosenbrock function by Newton-CG. Each Newton
// step solves H p = -g by conjugate gradients, where every product H v comes from adjoint::hvp
// (forward over reverse): the Hessian is never formed. Backtracking keeps each step a descent.
// Far from the minimum the valley is curved and steps are short; near (1, ..., 1) Newton
// converges quadratically, which the last printed steps show.
#include <cmath>
#include <cstdio>

#include "adjoint/adjoint.h"

using adjoint::Tensor;

namespace {

Tensor rosenbrock(const Tensor& x) {
  const int64_t n = x.shape()[0];
  Tensor head = x.slice(0, 0, n - 1), tail = x.slice(0, 1, n);
  Tensor a = tail - head * head, b = 1 - head;
  return (a * a * 100 + b * b).sum();
}

double inner(const Tensor& a, const Tensor& b) { return (a * b).sum().item<double>(); }

// Truncated conjugate gradients for H p = -g: stops at a relative residual of
// min(0.5, sqrt|g|) |g| (the Eisenstat-Walker forcing term that makes Newton-CG superlinear)
// or on negative curvature, where the steepest-descent direction is the safe answer.
Tensor solve_newton_direction(const Tensor& x, const Tensor& g, int& products) {
  const double gnorm = std::sqrt(inner(g, g));
  const double tol = std::min(0.5, std::sqrt(gnorm)) * gnorm;
  Tensor p = adjoint::zeros_like(g), r = -g, d = r;
  double rr = inner(r, r);
  for (int it = 0; it < 2 * g.numel(); ++it) {
    Tensor hd = adjoint::hvp(rosenbrock, x, d);
    ++products;
    const double curvature = inner(d, hd);
    if (curvature <= 0) return it == 0 ? -g : p;
    const double alpha = rr / curvature;
    p = p + d * alpha;
    r = r - hd * alpha;
    const double rr_next = inner(r, r);
    if (std::sqrt(rr_next) < tol) break;
    d = r + d * (rr_next / rr);
    rr = rr_next;
  }
  return p;
}

}  // namespace

int main() {
  constexpr int kDims = 10;
  // The classic start (-1.2, 1) repeated over the dimensions.
  std::vector<double> start;
  for (int i = 0; i < kDims; ++i) start.push_back(i % 2 == 0 ? -1.2 : 1.0);
  Tensor x = adjoint::tensor(start, std::nullopt, adjoint::DType::Float64);
  auto value_and_gradient = adjoint::value_and_grad(rosenbrock);

  std::printf("Newton-CG on the %d-dimensional Rosenbrock function (minimum 0 at all ones)\n",
              kDims);
  std::printf("%5s %14s %12s %10s %6s\n", "step", "f(x)", "|grad f|", "H*v calls", "t");
  int products = 0;
  for (int step = 0; step < 200; ++step) {
    auto [f, g] = value_and_gradient(x);
    const double fx = f.item<double>(), gnorm = std::sqrt(inner(g, g));
    if (gnorm < 1e-10) {
      std::printf("%5d %14.6e %12.3e %10d\n", step, fx, gnorm, products);
      const double err = (x - 1).abs().max().item<double>();
      std::printf(
          "converged after %d Newton steps and %d Hessian-vector products; "
          "max |x_i - 1| = %.2e\n",
          step, products, err);
      return err < 1e-8 ? 0 : 1;
    }
    Tensor p = solve_newton_direction(x, g, products);
    // Backtracking (Armijo): halve t until f decreases enough along p.
    double t = 1.0;
    const double slope = inner(g, p);
    while (rosenbrock(x + p * t).item<double>() > fx + 1e-4 * t * slope && t > 1e-10) t *= 0.5;
    // Every step of the first ten and of the quadratic end game, every tenth in between.
    if (step < 10 || step % 10 == 0 || gnorm < 1e-2)
      std::printf("%5d %14.6e %12.3e %10d %6.3g\n", step, fx, gnorm, products, t);
    x = x + p * t;
  }
  std::printf("did not converge\n");
  return 1;
}
