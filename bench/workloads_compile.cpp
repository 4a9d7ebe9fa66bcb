// pointwise-chain (adjoint only): an unfused tanh-GELU written with primitives (pow, mul, add,
// tanh) on a [4096, 1024] float32 leaf, forward and backward; the workload of compile's fusion.
// Eagerly each primitive makes a full-size intermediate; --compile runs the forward through
// adjoint::compile. Checks: the loss and the gradient's sum, equal with and without --compile.
#include <cmath>

#include "adjoint/adjoint.h"
#include "report.h"

namespace bench {
namespace {

using adjoint::Tensor;

Tensor gelu_by_primitives(const Tensor& x) {
  const double k = std::sqrt(2.0 / M_PI);
  Tensor inner = (x + adjoint::pow(x, 3.0) * 0.044715) * k;
  return x * 0.5 * (adjoint::tanh(inner) + 1.0);
}

void pointwise_chain(const Opts& o, Json& j) {
  adjoint::Generator gen(0);
  Tensor x = adjoint::randn({4096, 1024}, adjoint::DType::Float32, &gen).requires_grad_(true);
  auto forward = [](const Tensor& v) { return gelu_by_primitives(v).sum(); };
  const adjoint::CompiledFunction compiled = adjoint::compile(forward);
  Samples fwd, bwd, total;
  Tensor last_loss;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    x.zero_grad(/*set_to_none=*/true);
    const auto t0 = Clock::now();
    Tensor loss = o.compile ? compiled(x) : forward(x);
    const auto t1 = Clock::now();
    loss.backward();
    const auto t2 = Clock::now();
    last_loss = loss.detach();
    loss = Tensor();
    const auto t3 = Clock::now();
    if (s >= o.warmup) {
      fwd.add(ms(t0, t1));
      bwd.add(ms(t1, t2));
      total.add(ms(t0, t3));
    }
  }
  common_fields(j, o, total);
  j.num("fwd_ms", fwd.median());
  j.num("bwd_ms", bwd.median());
  j.num("loss", last_loss.item<double>());
  j.num("grad_sum", x.grad().sum().item<double>());
  j.integer("elements", x.numel());
}

}  // namespace

static RegisterWorkload register_pointwise_chain{"pointwise-chain", pointwise_chain, 20};

}  // namespace bench
