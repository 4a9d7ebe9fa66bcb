// The timed training step the cnn and lstm workloads share (torch-ref's loop): zero_grad in
// place (as libtorch 1.13), the loss under --precision's autocast, backward, the optimizer's
// step, teardown, with each phase timed.
#pragma once

#include <cmath>
#include <optional>

#include "adjoint/adjoint.h"
#include "adjoint/optim.h"
#include "report.h"

namespace bench {

struct StepTimes {
  Samples fwd, bwd, step, total;
  double first_loss = NAN;
  adjoint::Tensor last_loss;
};

/// One step; `loss_of(s)` computes the loss of step s. Adds its phases to `t` when `timed`.
template <class LossOf>
void optimizer_step(const Opts& o, adjoint::optim::Optimizer& opt, LossOf&& loss_of, int s,
                    bool timed, StepTimes& t) {
  const auto t0 = Clock::now();
  opt.zero_grad(false);
  const auto t1 = Clock::now();
  adjoint::Tensor loss;
  {
    std::optional<adjoint::Autocast> amp;
    autocast_forward(amp, o);
    loss = loss_of(s);
  }
  const auto t2 = Clock::now();
  loss.backward();
  const auto t3 = Clock::now();
  opt.step();
  const auto t4 = Clock::now();
  t.last_loss = loss.detach();
  loss = adjoint::Tensor();
  const auto t5 = Clock::now();
  if (s == 0) t.first_loss = t.last_loss.item<double>();
  if (timed) {
    t.fwd.add(ms(t1, t2));
    t.bwd.add(ms(t2, t3));
    t.step.add(ms(t3, t4));
    t.total.add(ms(t0, t5));
  }
}

}  // namespace bench
