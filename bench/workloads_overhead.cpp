// op-overhead: per-op dispatch and tape cost. 1000 x y = tanh(y * 0.999 + 0.001) on a [16]
// leaf (3000 recorded ops), then sum and backward; the loss and dloss/dx0 are exact checks
// (2.18889 and about 1.66e-9, as libtorch prints them). With --compile the forward (the loop
// and the sum) is one compiled function: traced in the first warmup step, replayed after.
#include "adjoint/adjoint.h"
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
  Samples fwd, bwd, fb, fre, total;
  Tensor last_loss;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    x.zero_grad(/*set_to_none=*/true);  // fresh gradient each step (untimed)
    const auto t0 = Clock::now();
    Tensor loss = o.compile ? compiled(x) : forward(x);
    const auto t1 = Clock::now();
    loss.backward();
    const auto t2 = Clock::now();
    last_loss = loss.detach();
    loss = Tensor();  // drop the recorded graph
    const auto t3 = Clock::now();
    if (s >= o.warmup) {
      fwd.add(ms(t0, t1));
      bwd.add(ms(t1, t2));
      fb.add(ms(t0, t2));
      fre.add(ms(t2, t3));
      total.add(ms(t0, t3));
    }
  }
  common_fields(j, o, total);
  j.num("fwd_ms", fwd.median());
  j.num("bwd_ms", bwd.median());
  j.num("free_ms", fre.median());
  j.num("ns_per_op", fb.median() * 1e6 / kOps);
  j.num("fwd_ns_per_op", fwd.median() * 1e6 / kOps);
  j.num("bwd_ns_per_op", bwd.median() * 1e6 / kOps);
  j.num("loss", last_loss.item<double>());
  j.num("grad_x0", x.grad().to_vector<double>()[0]);
}

static RegisterWorkload register_op_overhead{"op-overhead", op_overhead, 100};

}  // namespace bench
