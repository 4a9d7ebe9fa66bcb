// op-overhead: per-op dispatch and tape cost. 1000 x y = tanh(y * 0.999 + 0.001) on a [16]
// leaf (3000 recorded ops), then sum and backward; the loss and dloss/dx0 are exact checks
// (2.18889 and about 1.66e-9, as libtorch prints them). With --compile the forward (the loop
// and the sum) is one compiled function: traced in the first warmup step, replayed after.
#include "adjoint/adjoint.h"
#include "leaf_steps.h"
#include "report.h"

namespace bench {

void op_overhead(const Opts& o, Json& j) {
  using adjoint::Tensor;
  constexpr int kIters = 1000, kOps = 3 * kIters;
  Tensor x = adjoint::linspace(-1.0, 1.0, 16).requires_grad_(true);
  auto forward = [](const Tensor& x) {
    Tensor y = x;
    for (int i = 0; i < kIters; ++i) y = adjoint::tanh(y * 0.999 + 0.001);
    return y.sum();
  };
  const adjoint::CompiledFunction compiled = adjoint::compile(forward);
  const LeafSteps r =
      time_leaf_steps(o, x, [&](const Tensor& v) { return o.compile ? compiled(v) : forward(v); });
  common_fields(j, o, r.total);
  j.num("fwd_ms", r.fwd.median());
  j.num("bwd_ms", r.bwd.median());
  j.num("free_ms", r.free.median());
  j.num("ns_per_op", r.fwd_bwd.median() * 1e6 / kOps);
  j.num("fwd_ns_per_op", r.fwd.median() * 1e6 / kOps);
  j.num("bwd_ns_per_op", r.bwd.median() * 1e6 / kOps);
  j.num("loss", r.last_loss.item<double>());
  j.num("grad_x0", x.grad().to_vector<double>()[0]);
}

static RegisterWorkload register_op_overhead{"op-overhead", op_overhead, 100};

}  // namespace bench
