// adjoint-projectile: differentiating through a simulation. A projectile with quadratic air
// drag is integrated with fourth-order Runge-Kutta over 200 steps; gradient descent on the
// launch speed and angle, with gradients from adjoint::value_and_grad through all 200 steps,
// makes it pass through a target at a given time. The first gradient is checked against
// central finite differences of the simulation.
#include <cmath>
#include <cstdio>
#include <numbers>

#include "adjoint/adjoint.h"

using adjoint::Tensor;

namespace {

constexpr double kGravity = 9.81;                   // m/s²
constexpr double kDrag = 0.02;                      // 1/m: acceleration -k |v| v
constexpr double kFlightTime = 3.0;                 // s
constexpr int kSteps = 200;                         // RK4 steps over the flight
constexpr double kTargetX = 50.0, kTargetY = 12.0;  // m

struct State {
  Tensor x, y, vx, vy;
};

// d/dt (x, y, vx, vy) = (vx, vy, -k |v| vx, -g - k |v| vy)
State derivative(const State& s) {
  Tensor speed = adjoint::sqrt(s.vx * s.vx + s.vy * s.vy);
  return {s.vx, s.vy, -kDrag * speed * s.vx, -kDrag * speed * s.vy - kGravity};
}

State axpy(const State& s, const State& d, double h) {
  return {s.x + d.x * h, s.y + d.y * h, s.vx + d.vx * h, s.vy + d.vy * h};
}

State rk4_step(const State& s, double h) {
  const State k1 = derivative(s);
  const State k2 = derivative(axpy(s, k1, h / 2));
  const State k3 = derivative(axpy(s, k2, h / 2));
  const State k4 = derivative(axpy(s, k3, h));
  auto combine = [&](const Tensor& v, const Tensor& a, const Tensor& b, const Tensor& c,
                     const Tensor& d) { return v + (a + (b + c) * 2 + d) * (h / 6); };
  return {combine(s.x, k1.x, k2.x, k3.x, k4.x), combine(s.y, k1.y, k2.y, k3.y, k4.y),
          combine(s.vx, k1.vx, k2.vx, k3.vx, k4.vx), combine(s.vy, k1.vy, k2.vy, k3.vy, k4.vy)};
}

// Where the projectile is at the end of the flight, launched from the origin.
State fly(const Tensor& speed, const Tensor& angle) {
  Tensor zero = adjoint::zeros_like(speed);
  State s{zero, zero, speed * adjoint::cos(angle), speed * adjoint::sin(angle)};
  for (int i = 0; i < kSteps; ++i) s = rk4_step(s, kFlightTime / kSteps);
  return s;
}

// Squared miss distance at the end of the flight. The speed enters in units of 10 m/s so that
// both parameters have similar scales for gradient descent.
Tensor miss(const Tensor& speed_10, const Tensor& angle) {
  State end = fly(speed_10 * 10, angle);
  Tensor dx = end.x - kTargetX, dy = end.y - kTargetY;
  return dx * dx + dy * dy;
}

double scalar(const Tensor& t) { return t.item<double>(); }
Tensor f64(double v) { return adjoint::scalar_tensor(v, adjoint::DType::Float64); }

}  // namespace

int main() {
  double speed_10 = 2.5, angle = std::numbers::pi / 6;  // 25 m/s at 30 degrees
  auto loss_and_grads = adjoint::value_and_grad(miss, {0, 1});

  {  // The gradient through 300 RK4 steps against central finite differences.
    auto [loss, g] = loss_and_grads(f64(speed_10), f64(angle));
    const double h = 1e-6;
    const double fd_speed = (scalar(miss(f64(speed_10 + h), f64(angle))) -
                             scalar(miss(f64(speed_10 - h), f64(angle)))) /
                            (2 * h);
    const double fd_angle = (scalar(miss(f64(speed_10), f64(angle + h))) -
                             scalar(miss(f64(speed_10), f64(angle - h)))) /
                            (2 * h);
    std::printf("gradient through %d RK4 steps at the start:\n", kSteps);
    std::printf("  d miss / d speed: reverse mode %+.10e, finite differences %+.10e\n",
                scalar(g[0]) / 10, fd_speed / 10);
    std::printf("  d miss / d angle: reverse mode %+.10e, finite differences %+.10e\n\n",
                scalar(g[1]), fd_angle);
    if (std::abs(scalar(g[0]) - fd_speed) > 1e-5 * std::abs(fd_speed) ||
        std::abs(scalar(g[1]) - fd_angle) > 1e-5 * std::abs(fd_angle)) {
      std::printf("gradient check failed\n");
      return 1;
    }
  }

  // Gradient descent with momentum.
  const double lr = 2e-4, momentum = 0.9;
  double v_speed = 0, v_angle = 0, distance = 0;
  std::printf("target (%.1f m, %.1f m) at t = %.1f s\n", kTargetX, kTargetY, kFlightTime);
  std::printf("%5s %12s %12s %14s\n", "iter", "speed m/s", "angle deg", "miss m");
  int iter = 0;
  for (; iter < 2000; ++iter) {
    auto [loss, g] = loss_and_grads(f64(speed_10), f64(angle));
    distance = std::sqrt(scalar(loss));
    if (iter % 25 == 0 || distance < 1e-2)
      std::printf("%5d %12.4f %12.4f %14.6f\n", iter, speed_10 * 10, angle * 180 / std::numbers::pi,
                  distance);
    if (distance < 1e-2) break;
    v_speed = momentum * v_speed - lr * scalar(g[0]);
    v_angle = momentum * v_angle - lr * scalar(g[1]);
    speed_10 += v_speed;
    angle += v_angle;
  }
  std::printf(
      "\nlaunch at %.4f m/s, %.4f degrees: misses the target by %.2e m after %d "
      "iterations\n",
      speed_10 * 10, angle * 180 / std::numbers::pi, distance, iter);
  return distance < 1e-2 ? 0 : 1;
}
