// pointwise-chain (adjoint only): an unfused tanh-GELU written with primitives (pow, mul, add,
// tanh) on a [4096, 1024] float32 leaf, forward and backward; the workload of compile's fusion.
// Eagerly each primitive makes a full-size intermediate; --compile runs the forward through
// adjoint::compile. Checks: the loss and the gradient's sum, equal with and without --compile.
#include <cmath>

#include "adjoint/adjoint.h"
#include "leaf_steps.h"
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
  const LeafSteps r =
      time_leaf_steps(o, x, [&](const Tensor& v) { return o.compile ? compiled(v) : forward(v); });
  common_fields(j, o, r.total);
  j.num("fwd_ms", r.fwd.median());
  j.num("bwd_ms", r.bwd.median());
  j.num("loss", r.last_loss.item<double>());
  j.num("grad_sum", x.grad().sum().item<double>());
  j.integer("elements", x.numel());
}

}  // namespace

static RegisterWorkload register_pointwise_chain{"pointwise-chain", pointwise_chain, 20};

}  // namespace bench
