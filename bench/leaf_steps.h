// The step loop of the workloads that differentiate one leaf (op-overhead, pointwise-chain):
// clear x.grad (untimed), loss = forward(x), loss.backward(), drop the graph; warmup steps are
// not recorded.
#pragma once

#include "adjoint/adjoint.h"
#include "report.h"

namespace bench {

struct LeafSteps {
  Samples fwd, bwd, fwd_bwd, free, total;
  adjoint::Tensor last_loss;
};

template <class F>
LeafSteps time_leaf_steps(const Opts& o, const adjoint::Tensor& x, F&& forward) {
  LeafSteps r;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    x.zero_grad(/*set_to_none=*/true);
    const auto t0 = Clock::now();
    adjoint::Tensor loss = forward(x);
    const auto t1 = Clock::now();
    loss.backward();
    const auto t2 = Clock::now();
    r.last_loss = loss.detach();
    loss = adjoint::Tensor();  // drop the recorded graph
    const auto t3 = Clock::now();
    if (s >= o.warmup) {
      r.fwd.add(ms(t0, t1));
      r.bwd.add(ms(t1, t2));
      r.fwd_bwd.add(ms(t0, t2));
      r.free.add(ms(t2, t3));
      r.total.add(ms(t0, t3));
    }
  }
  return r;
}

}  // namespace bench
