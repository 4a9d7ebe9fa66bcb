// adjoint-sensitivity: sensitivity analysis with forward mode, few inputs and many outputs.
// A Lotka-Volterra predator-prey model with 4 parameters is integrated with RK4 over 400
// steps; the sensitivity of all 800 trajectory values to the parameters is a 800 x 4
// Jacobian. jacfwd needs 4 forward passes with tangents; reverse mode needs one backward pass
// per row, 800 of them. jacfwd is timed in full; reverse mode is timed over a sample of rows
// (vjp's pullback, called once per row), which also checks those rows. Everything is checked
// against central finite differences.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "adjoint/adjoint.h"

using adjoint::Tensor;

namespace {

constexpr int kSteps = 400;
constexpr double kDt = 0.05;
const char* kNames[] = {"alpha", "beta", "gamma", "delta"};

// prey' = alpha prey - beta prey predator, predator' = delta prey predator - gamma predator
void derivative(const Tensor& p, const Tensor& prey, const Tensor& pred, Tensor& dprey,
                Tensor& dpred) {
  Tensor alpha = p.slice(0, 0, 1), beta = p.slice(0, 1, 2), gamma = p.slice(0, 2, 3),
         delta = p.slice(0, 3, 4);
  Tensor meet = prey * pred;
  dprey = alpha * prey - beta * meet;
  dpred = delta * meet - gamma * pred;
}

// The trajectory [prey_1..prey_N, predator_1..predator_N] for parameters p (shape [4]).
Tensor trajectory(const Tensor& p) {
  Tensor prey = adjoint::full({1}, 10.0, adjoint::DType::Float64);
  Tensor pred = adjoint::full({1}, 5.0, adjoint::DType::Float64);
  std::vector<Tensor> preys, preds;
  for (int i = 0; i < kSteps; ++i) {
    Tensor a1, b1, a2, b2, a3, b3, a4, b4;
    derivative(p, prey, pred, a1, b1);
    derivative(p, prey + a1 * (kDt / 2), pred + b1 * (kDt / 2), a2, b2);
    derivative(p, prey + a2 * (kDt / 2), pred + b2 * (kDt / 2), a3, b3);
    derivative(p, prey + a3 * kDt, pred + b3 * kDt, a4, b4);
    prey = prey + (a1 + (a2 + a3) * 2 + a4) * (kDt / 6);
    pred = pred + (b1 + (b2 + b3) * 2 + b4) * (kDt / 6);
    preys.push_back(prey);
    preds.push_back(pred);
  }
  preys.insert(preys.end(), preds.begin(), preds.end());
  return adjoint::cat(preys, 0);
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main() {
  const Tensor params = adjoint::tensor({1.1, 0.4, 0.4, 0.1}, adjoint::DType::Float64);

  auto t0 = std::chrono::steady_clock::now();
  const Tensor forward = adjoint::jacfwd(trajectory)(params);
  const double forward_ms = since(t0);
  // Reverse mode, row by row: one pullback per trajectory value, on a sample of rows.
  const int kRowsTimed = 16;
  std::vector<double> rows;
  std::vector<int> row_index;
  t0 = std::chrono::steady_clock::now();
  auto [values, pullback] = adjoint::vjp(trajectory, params);
  for (int r = 0; r < kRowsTimed; ++r) {
    const int i = r * (2 * kSteps / kRowsTimed);
    Tensor seed = adjoint::zeros({2 * kSteps}, adjoint::DType::Float64);
    seed.data_ptr<double>()[i] = 1;
    std::vector<double> g = pullback(seed).to_vector<double>();
    rows.insert(rows.end(), g.begin(), g.end());
    row_index.push_back(i);
  }
  const double reverse_ms_per_row = since(t0) / kRowsTimed;

  // Central finite differences, one parameter at a time.
  const double h = 1e-6;
  std::vector<double> fd(2 * kSteps * 4);
  for (int j = 0; j < 4; ++j) {
    Tensor e = adjoint::zeros({4}, adjoint::DType::Float64);
    e.data_ptr<double>()[j] = h;
    std::vector<double> up = trajectory(params + e).to_vector<double>();
    std::vector<double> down = trajectory(params - e).to_vector<double>();
    for (int i = 0; i < 2 * kSteps; ++i) fd[i * 4 + j] = (up[i] - down[i]) / (2 * h);
  }
  const std::vector<double> jf = forward.to_vector<double>();
  double modes = 0, vs_fd = 0, scale = 0;
  for (std::size_t k = 0; k < jf.size(); ++k) {
    vs_fd = std::max(vs_fd, std::abs(jf[k] - fd[k]));
    scale = std::max(scale, std::abs(jf[k]));
  }
  for (int r = 0; r < kRowsTimed; ++r)
    for (int j = 0; j < 4; ++j)
      modes = std::max(modes, std::abs(jf[row_index[r] * 4 + j] - rows[r * 4 + j]));

  std::printf(
      "Lotka-Volterra, %d RK4 steps: Jacobian of %d trajectory values w.r.t. 4 "
      "parameters\n",
      kSteps, 2 * kSteps);
  std::printf("  forward mode, jacfwd (4 passes):           %9.1f ms\n", forward_ms);
  std::printf(
      "  reverse mode, one row per backward pass:   %9.1f ms per row, so about %.0f ms "
      "for all %d rows\n",
      reverse_ms_per_row, reverse_ms_per_row * 2 * kSteps, 2 * kSteps);
  std::printf(
      "  max |forward - reverse| over %d sampled rows = %.2e; max |forward - finite "
      "differences| = %.2e (largest entry %.2e)\n\n",
      kRowsTimed, modes, vs_fd, scale);
  std::printf("sensitivity of the prey population to each parameter:\n%8s", "t");
  for (const char* n : kNames) std::printf(" %12s", n);
  std::printf("\n");
  for (int i = 39; i < kSteps; i += 40) {
    std::printf("%8.2f", (i + 1) * kDt);
    for (int j = 0; j < 4; ++j) std::printf(" %12.4f", jf[i * 4 + j]);
    std::printf("\n");
  }
  return modes < 1e-9 * scale && vs_fd < 1e-5 * scale ? 0 : 1;
}
