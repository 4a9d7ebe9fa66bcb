// ode-adjoint: a neural ODE y' = W2 tanh(W1 y + b1) + b2 (a batch of 64 states of 32, 128
// hidden units, float32) integrated by 1,000 RK4 steps over [0, 1]; the gradient of
// sum(y(1)²) with respect to the MLP's parameters by backprop through the steps, the
// continuous adjoint and checkpoint_loop (32 snapshots). For each: median ms per gradient, the
// peak bytes of tensors saved for backward and the peak of all tensor storage during it, and
// how far its gradient is from backprop's. Shows the O(steps) / O(1) / O(snapshots) memory.
#include <cmath>
#include <vector>

#include "adjoint/adjoint.h"
#include "mlp_model.h"
#include "report.h"

namespace bench {
namespace {

using adjoint::Tensor;

constexpr int kBatch = 64, kDim = 32, kHidden = 128, kOdeSteps = 1000, kSnapshots = 32;

Tensor vector_field(double, const Tensor& y, const std::vector<Tensor>& p) {
  return adjoint::linear(adjoint::tanh(adjoint::linear(y, p[0], p[1])), p[2], p[3]);
}

double rel_diff(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]).square().sum().item<double>();
    den += b[i].square().sum().item<double>();
  }
  return std::sqrt(num / den);
}

void ode_adjoint(const Opts& o, Json& j) {
  adjoint::Generator gen(0);
  const Linear fc1(kDim, kHidden, gen), fc2(kHidden, kDim, gen);
  const std::vector<Tensor> params = {fc1.weight, fc1.bias, fc2.weight, fc2.bias};
  const Tensor y0 = adjoint::randn({kBatch, kDim}, {}, &gen);
  const Tensor t = adjoint::tensor({0.0, 1.0}, adjoint::DType::Float32);

  struct Method {
    const char* name;
    adjoint::OdeGradient gradient;
    Samples ms;
    double saved_peak = 0, storage_peak = 0;
    std::vector<Tensor> grads;
  };
  std::vector<Method> methods = {{"backprop", adjoint::OdeGradient::Backprop, {}, 0, 0, {}},
                                 {"adjoint", adjoint::OdeGradient::Adjoint, {}, 0, 0, {}},
                                 {"checkpoint", adjoint::OdeGradient::Checkpoint, {}, 0, 0, {}}};
  // Interleaved step by step so that drift in the machine's speed hits all three alike.
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    for (Method& m : methods) {
      adjoint::OdeOptions opts;
      opts.method = adjoint::OdeMethod::RK4;
      opts.step_size = 1.0 / kOdeSteps;
      opts.gradient = m.gradient;
      opts.snapshots = kSnapshots;
      adjoint::SavedMemoryTracker tracker;
      adjoint::reset_peak_memory_usage();
      const auto t0 = Clock::now();
      Tensor ys = adjoint::odeint(vector_field, y0, t, params, opts);
      Tensor loss = ys.select(0, 1).square().sum();
      std::vector<Tensor> g = adjoint::autograd::grad({loss}, params);
      const auto t1 = Clock::now();
      const adjoint::MemoryUsage u = adjoint::memory_usage();
      if (s >= o.warmup) m.ms.add(ms(t0, t1));
      m.saved_peak = static_cast<double>(u.saved_peak_bytes);
      m.storage_peak = static_cast<double>(u.storage_peak_bytes);
      m.grads = g;
    }
  }
  common_fields(j, o, methods[0].ms);
  j.integer("ode_steps", kOdeSteps);
  j.integer("snapshots", kSnapshots);
  for (const Method& m : methods) {
    const std::string n = m.name;
    j.num(n + "_ms_per_grad", m.ms.median());
    j.num(n + "_saved_peak_mib", m.saved_peak / kMiB);
    j.num(n + "_storage_peak_mib", m.storage_peak / kMiB);
  }
  j.num("adjoint_grad_rel_diff", rel_diff(methods[1].grads, methods[0].grads));
  j.num("checkpoint_grad_rel_diff", rel_diff(methods[2].grads, methods[0].grads));
  // Accuracy against the exact gradient of the continuous problem, approximated in float64 by
  // the adjoint method with Dopri5 at rtol 1e-10 (not timed).
  std::vector<Tensor> p64;
  for (const Tensor& q : params) p64.push_back(q.detach().to(adjoint::DType::Float64));
  adjoint::OdeOptions ref;
  ref.rtol = 1e-10;
  ref.atol = 1e-12;
  ref.gradient = adjoint::OdeGradient::Adjoint;
  auto loss64 = [&](const std::vector<Tensor>& q) {
    return adjoint::odeint(vector_field, y0.to(adjoint::DType::Float64),
                           t.to(adjoint::DType::Float64), q, ref)
        .select(0, 1)
        .square()
        .sum();
  };
  const std::vector<Tensor> exact = adjoint::grad(loss64)(p64);
  for (const Method& m : methods) {
    std::vector<Tensor> g64;
    for (const Tensor& g : m.grads) g64.push_back(g.to(adjoint::DType::Float64));
    j.num(std::string(m.name) + "_grad_rel_error", rel_diff(g64, exact));
  }
}

static RegisterWorkload reg{"ode-adjoint", ode_adjoint, 3};

}  // namespace
}  // namespace bench
