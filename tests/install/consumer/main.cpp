// A program outside adjoint's build: computes the gradient of f(x) = sum(x² · exp(x)) and
// returns 0 when it matches the hand-derived f'(x) = (2x + x²) · exp(x). Built by both the
// find_package consumer and the add_subdirectory project in tests/install/.
#include <adjoint/adjoint.h>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  const std::vector<double> xs = {-1.5, 0.0, 0.25, 2.0};
  adjoint::Tensor x = adjoint::tensor(xs).requires_grad_(true);
  adjoint::Tensor f = (x * x * adjoint::exp(x)).sum();
  f.backward();
  const std::vector<double> g = x.grad().to_vector<double>();
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double want = (2 * xs[i] + xs[i] * xs[i]) * std::exp(xs[i]);
    if (std::abs(g[i] - want) > 1e-12 * (1 + std::abs(want))) {
      std::fprintf(stderr, "wrong gradient at %zu: %.17g, expected %.17g\n", i, g[i], want);
      return 1;
    }
  }
  std::printf("adjoint consumer: gradient ok\n");
  return 0;
}
