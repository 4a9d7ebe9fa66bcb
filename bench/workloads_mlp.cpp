// The matmul-bound workloads: `mlp` (784-1024-1024-10 training step with SGD) and
// `deep-mlp` (32 x [Linear(512,512) -> tanh], forward + backward, activation memory).
// Parameters use libtorch's default Linear init, U(-1/sqrt(in), 1/sqrt(in)), drawn from
// adjoint's own seeded Generator, so values differ from libtorch but the work is the same.
#include <cmath>
#include <vector>

#include "adjoint/adjoint.h"
#include "checkpoint_modes.h"
#include "data_parallel_mode.h"
#include "gemm_bound.h"
#include "mlp_model.h"
#include "report.h"

namespace bench {
namespace {

using adjoint::Tensor;

}  // namespace

// MLP training step: zero_grad (in place), forward + CE loss, backward, SGD, teardown.
void mlp(const Opts& o, Json& j) {
  constexpr int kBatch = 128;
  adjoint::Generator gen(0);
  const Linear fc1(784, 1024, gen), fc2(1024, 1024, gen), fc3(1024, 10, gen);
  const std::vector<Tensor> params = {fc1.weight, fc1.bias,   fc2.weight,
                                      fc2.bias,   fc3.weight, fc3.bias};
  DataParallelMode dp(o, params);  // --data-parallel: this rank's rows, DDP
  const Tensor x = dp.rows(adjoint::randn({kBatch, 784}, {}, &gen));
  const Tensor labels = dp.rows(adjoint::randint(0, 10, {kBatch}, &gen));
  auto forward = [&](const Tensor& in) { return fc3(adjoint::relu(fc2(adjoint::relu(fc1(in))))); };

  Samples fwd, bwd, step, total;
  Tensor last_loss;
  auto run_step = [&](bool timed) {
    const auto t0 = Clock::now();
    for (const auto& p : params) p.zero_grad(/*set_to_none=*/false);  // in place, as libtorch 1.13
    const auto t1 = Clock::now();
    Tensor loss;
    {
      std::optional<adjoint::Autocast> amp;
      autocast_forward(amp, o);
      loss = adjoint::cross_entropy(forward(x), labels);
    }
    const auto t2 = Clock::now();
    loss.backward();
    const auto t3 = Clock::now();
    {
      adjoint::NoGradGuard no_grad;
      for (Tensor p : params) p.sub_(p.grad(), 0.01);  // p -= lr * grad
    }
    const auto t4 = Clock::now();
    last_loss = loss.detach();
    loss = Tensor();
    const auto t5 = Clock::now();
    if (timed) {
      fwd.add(ms(t1, t2));
      bwd.add(ms(t2, t3));
      step.add(ms(t3, t4));
      total.add(ms(t0, t5));
      dp.record();
    }
  };
  for (int s = 0; s < o.warmup + o.steps; ++s) run_step(s >= o.warmup);
  const long long P = count_params(params);
  const double flops = 6.0 * P * kBatch;
  common_fields(j, o, total);
  report_gemm_bound(j, total.median(), [&] { run_step(false); });
  j.str("precision", o.precision);
  j.num("fwd_ms", fwd.median());
  j.num("bwd_ms", bwd.median());
  j.num("opt_ms", step.median());
  j.num("bwd_over_fwd", bwd.median() / fwd.median());
  j.integer("params", P);
  j.num("flops_per_step", flops);
  j.num("gflops", flops / (total.median() * 1e6));
  j.num("loss", last_loss.item<double>());
  dp.report(j);
}

// 32 x (Linear(512,512) + tanh), loss = mean(out^2), forward + backward, grads set to none.
void deep_mlp(const Opts& o, Json& j) {
  constexpr int kDepth = 32, kWidth = 512, kBatch = 256;
  adjoint::Generator gen(0);
  std::vector<Linear> layers;
  std::vector<Tensor> params;
  for (int i = 0; i < kDepth; ++i) {
    layers.emplace_back(kWidth, kWidth, gen);
    params.push_back(layers.back().weight);
    params.push_back(layers.back().bias);
  }
  const Tensor x = adjoint::randn({kBatch, kWidth}, {}, &gen);
  std::optional<adjoint::CheckpointPlan> plan;   // of --checkpoint budget=BYTES
  std::vector<adjoint::CheckpointLayer> blocks;  // Linear -> tanh, for --checkpoint
  for (const auto& layer : layers)
    blocks.push_back([&layer](const Tensor& in) { return adjoint::tanh(layer(in)); });

  // Growth over the forward pass, relative to just before it (probed steps are untimed).
  struct Mem {
    double malloc_peak_mib = 0;  // glibc: max over probes after every layer and the loss
    double storage_fwd_mib = 0;  // allocator: peak live storage during the forward
    double storage_peak = 0;     // allocator: peak live storage from forward to end of backward
  };
  Tensor last_loss;
  auto run_step = [&](Samples* fwd, Samples* bwd, Samples* total, Mem* mem) {
    const auto t0 = Clock::now();
    for (const auto& p : params) p.zero_grad(/*set_to_none=*/true);
    const auto t1 = Clock::now();
    double m0 = 0, s0 = 0;
    if (mem) {
      adjoint::reset_peak_memory_stats();
      m0 = malloc_in_use_mib();
      s0 = static_cast<double>(adjoint::memory_stats().current_bytes);
    }
    const auto t1b = Clock::now();
    std::optional<adjoint::Autocast> amp;
    autocast_forward(amp, o);
    Tensor h = x;
    if (o.checkpoint == "none") {
      for (const auto& layer : layers) {
        h = adjoint::tanh(layer(h));
        if (mem) mem->malloc_peak_mib = std::max(mem->malloc_peak_mib, malloc_in_use_mib() - m0);
      }
    } else {
      h = run_layers(blocks, x, o.checkpoint, plan);
    }
    Tensor loss = h.pow(2).mean();
    amp.reset();
    const auto t2 = Clock::now();
    if (mem) {
      mem->malloc_peak_mib = std::max(mem->malloc_peak_mib, malloc_in_use_mib() - m0);
      mem->storage_fwd_mib = (static_cast<double>(adjoint::memory_stats().peak_bytes) - s0) / kMiB;
    }
    h = Tensor();
    const auto t2b = Clock::now();
    loss.backward();
    const auto t3 = Clock::now();
    if (mem) mem->storage_peak = static_cast<double>(adjoint::memory_stats().peak_bytes);
    last_loss = loss.detach();
    loss = Tensor();
    const auto t4 = Clock::now();
    if (total) {
      fwd->add(ms(t1b, t2));
      bwd->add(ms(t2b, t3));
      total->add(ms(t0, t1) + ms(t1b, t2) + ms(t2b, t4));
    }
  };

  Mem cold;
  run_step(nullptr, nullptr, nullptr, &cold);  // the process's first forward: cold numbers
  for (int s = 1; s < o.warmup; ++s) run_step(nullptr, nullptr, nullptr, nullptr);
  Samples fwd, bwd, total;
  for (int s = 0; s < o.steps; ++s) run_step(&fwd, &bwd, &total, nullptr);
  Samples mm, sf, sp;  // steady state: 3 extra probed (untimed) steps
  for (int s = 0; s < 3; ++s) {
    Mem m;
    run_step(nullptr, nullptr, nullptr, &m);
    mm.add(m.malloc_peak_mib);
    sf.add(m.storage_fwd_mib);
    sp.add(m.storage_peak);
  }
  const double saved_peak = saved_peak_bytes([&] { run_step(nullptr, nullptr, nullptr, nullptr); });
  const long long P = count_params(params);
  common_fields(j, o, total);
  report_gemm_bound(j, total.median(), [&] { run_step(nullptr, nullptr, nullptr, nullptr); });
  j.str("checkpoint", o.checkpoint);
  j.str("precision", o.precision);
  j.num("fwd_ms", fwd.median());
  j.num("bwd_ms", bwd.median());
  j.integer("params", P);
  j.integer("peak_saved_bytes", static_cast<long long>(saved_peak));
  j.num("gflops", 6.0 * P * kBatch / (total.median() * 1e6));
  j.num("saved_activation_mib_expected", kDepth * kBatch * kWidth * 4.0 / kMiB);
  j.num("fwd_malloc_peak_growth_mib", mm.median());
  j.num("fwd_malloc_peak_growth_cold_mib", cold.malloc_peak_mib);
  j.num("fwd_storage_peak_growth_mib", sf.median());
  j.integer("peak_storage_bytes", static_cast<long long>(sp.median()));
  j.num("loss", last_loss.item<double>());
}

static RegisterWorkload register_mlp{"mlp", mlp, 100};
static RegisterWorkload register_deep_mlp{"deep-mlp", deep_mlp, 30};

}  // namespace bench
