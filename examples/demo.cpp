// adjoint-demo (`make demo`): (a) the gradient of f(x, y) = (x + y)·sin(x) next to its
// hand-derived value; (b) a 2-32-32-2 tanh MLP trained with a hand-written Adam on a
// generated two-moons dataset. Exits non-zero if the held-out accuracy is not above 95 %.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numbers>
#include <vector>

#include "adjoint/adjoint.h"

using adjoint::Tensor;

namespace {

// (a) Reverse mode on a two-variable scalar function, checked against calculus.
bool gradient_demo() {
  const double xv = 0.7, yv = -1.9;
  Tensor x = adjoint::scalar_tensor(xv, adjoint::DType::Float64).requires_grad_(true);
  Tensor y = adjoint::scalar_tensor(yv, adjoint::DType::Float64).requires_grad_(true);
  Tensor f = (x + y) * adjoint::sin(x);
  f.backward();
  const double gx = x.grad().item<double>(), gy = y.grad().item<double>();
  // df/dx = sin x + (x + y) cos x,  df/dy = sin x
  const double ex = std::sin(xv) + (xv + yv) * std::cos(xv), ey = std::sin(xv);
  std::printf("f(x, y) = (x + y) * sin(x) at x = %.2f, y = %.2f: f = %.6f\n", xv, yv,
              f.item<double>());
  std::printf("  df/dx = %+.12f   by hand: sin x + (x + y) cos x = %+.12f\n", gx, ex);
  std::printf("  df/dy = %+.12f   by hand: sin x                 = %+.12f\n\n", gy, ey);
  return std::abs(gx - ex) < 1e-12 && std::abs(gy - ey) < 1e-12;
}

// Two interleaving half circles with Gaussian noise (as sklearn's make_moons), n points.
void make_moons(int n, double noise, adjoint::Generator& gen, Tensor& points, Tensor& labels) {
  std::vector<float> xy(2 * n);
  std::vector<int64_t> cls(n);
  for (int i = 0; i < n; ++i) {
    const double t = std::numbers::pi * gen.next_double();
    const bool inner = i % 2 == 1;
    const double px = inner ? 1 - std::cos(t) : std::cos(t);
    const double py = inner ? 0.5 - std::sin(t) : std::sin(t);
    xy[2 * i] = static_cast<float>(px + noise * gen.next_normal());
    xy[2 * i + 1] = static_cast<float>(py + noise * gen.next_normal());
    cls[i] = inner ? 1 : 0;
  }
  points = adjoint::tensor(xy, adjoint::Shape{n, 2});
  labels = adjoint::tensor(cls);
}

// Linear(in, out) parameters with libtorch's default init, U(-1/sqrt(in), 1/sqrt(in)).
Tensor uniform_param(const adjoint::Shape& shape, int64_t in, adjoint::Generator& gen) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  return (adjoint::rand(shape, {}, &gen) * (2 * bound) - bound).requires_grad_(true);
}

struct Mlp {
  std::vector<Tensor> params;  // w1, b1, w2, b2, w3, b3
  explicit Mlp(adjoint::Generator& gen) {
    const int64_t sizes[] = {2, 32, 32, 2};
    for (int l = 0; l < 3; ++l) {
      params.push_back(uniform_param({sizes[l + 1], sizes[l]}, sizes[l], gen));
      params.push_back(uniform_param({sizes[l + 1]}, sizes[l], gen));
    }
  }
  Tensor operator()(const Tensor& x) const {
    Tensor h = adjoint::tanh(adjoint::linear(x, params[0], params[1]));
    h = adjoint::tanh(adjoint::linear(h, params[2], params[3]));
    return adjoint::linear(h, params[4], params[5]);  // logits
  }
};

// Adam (Kingma & Ba) written with in-place ops; no graph is recorded for the update.
struct Adam {
  double lr = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int t = 0;
  std::vector<Tensor> m, v;
  explicit Adam(const std::vector<Tensor>& params) {
    for (const Tensor& p : params) {
      m.push_back(adjoint::zeros_like(p));
      v.push_back(adjoint::zeros_like(p));
    }
  }
  void step(const std::vector<Tensor>& params) {
    adjoint::NoGradGuard no_grad;
    ++t;
    const double c1 = 1 - std::pow(beta1, t), c2 = 1 - std::pow(beta2, t);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const Tensor g = params[i].grad();
      m[i].mul_(beta1).add_(g, 1 - beta1);      // m = b1 m + (1 - b1) g
      v[i].mul_(beta2).add_(g * g, 1 - beta2);  // v = b2 v + (1 - b2) g²
      Tensor p = params[i];
      p.sub_((m[i] / c1) / ((v[i] / c2).sqrt() + eps), lr);
    }
  }
};

double accuracy(const Tensor& logits, const Tensor& labels) {
  return adjoint::eq(logits.argmax(1), labels).to(adjoint::DType::Float32).mean().item<double>();
}

// (b) Train on two moons; returns the held-out accuracy.
double training_demo() {
  adjoint::Generator gen(42);
  Tensor x_train, y_train, x_test, y_test;
  make_moons(1000, 0.1, gen, x_train, y_train);
  make_moons(1000, 0.1, gen, x_test, y_test);
  Mlp model(gen);
  Adam opt(model.params);
  std::printf(
      "two moons (noise 0.1): 1000 training points, 1000 held out; 2-32-32-2 tanh MLP, "
      "Adam lr %.3g, full batch\n",
      opt.lr);
  const auto start = std::chrono::steady_clock::now();
  constexpr int kSteps = 300;
  for (int step = 1; step <= kSteps; ++step) {
    for (const Tensor& p : model.params) p.zero_grad();
    Tensor logits = model(x_train);
    Tensor loss = adjoint::cross_entropy(logits, y_train);
    loss.backward();
    opt.step(model.params);
    if (step == 1 || step % 50 == 0) {
      std::printf("  step %4d  loss %.4f  train accuracy %5.1f %%\n", step, loss.item<double>(),
                  100 * accuracy(logits.detach(), y_train));
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  adjoint::InferenceMode inference;
  const double train_acc = accuracy(model(x_train), y_train);
  const double test_acc = accuracy(model(x_test), y_test);
  std::printf("final: train accuracy %.1f %%, held-out accuracy %.1f %% (%d steps, %.2f s)\n",
              100 * train_acc, 100 * test_acc, kSteps, seconds);
  return std::min(train_acc, test_acc);
}

}  // namespace

int main() {
  try {
    const bool grad_ok = gradient_demo();
    const double acc = training_demo();
    if (!grad_ok) std::printf("FAIL: the gradient differs from the hand-derived value\n");
    if (acc <= 0.95) std::printf("FAIL: accuracy %.1f %% is not above 95 %%\n", 100 * acc);
    return grad_ok && acc > 0.95 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
