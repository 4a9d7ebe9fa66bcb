// The `gpt-tiny` workload: a training step of adjoint::nn::GPT (vocab 256, context 128,
// d 256, 4 heads, 4 layers, batch 16) with AdamW, exactly as ../shared/bench/README.md defines
// it. Parameters and data come from adjoint's own seeded Generator, so values differ from
// libtorch but the work is the same. Also reports the allocator's peak live storage per step.
#include <cmath>
#include <cstdint>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "adjoint/optim.h"
#include "checkpoint_modes.h"
#include "data_parallel_mode.h"
#include "report.h"

namespace bench {
namespace {

using adjoint::Tensor;

constexpr int64_t kVocab = 256, kCtx = 128, kDModel = 256, kHeads = 4, kLayers = 4, kBatch = 16;

// zero_grad (in place), forward + loss, backward, AdamW, teardown.
void gpt_tiny(const Opts& o, Json& j) {
  adjoint::Generator gen(0);
  adjoint::nn::GPT model(adjoint::nn::GPTConfig{kVocab, kCtx, kDModel, kHeads, kLayers, 0.0}, &gen);
  const std::vector<Tensor> params = model.parameters();
  const Tensor tokens = adjoint::randint(0, kVocab, {kBatch, kCtx + 1}, &gen);
  const adjoint::optim::AdamWOptions adamw{
      .lr = 3e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
  adjoint::optim::AdamW opt(params, adamw);
  DataParallelMode dp(o, model, adamw);  // --data-parallel: this rank's rows, DDP (ZeRO)
  const Tensor inputs = dp.rows(tokens.slice(1, 0, kCtx));
  const Tensor targets = dp.rows(tokens.slice(1, 1, kCtx + 1));

  model.run_blocks = block_runner(o.checkpoint);
  // --compile: the forward and the loss as one compiled function (the parameters captured).
  const adjoint::CompiledFunction compiled_loss = adjoint::compile(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{model.loss(in[0], in[1])}; });
  auto forward_loss = [&] {
    return o.compile ? compiled_loss({inputs, targets})[0] : model.loss(inputs, targets);
  };

  Samples fwd, bwd, step, total, peak;
  double first_loss = NAN;
  Tensor last_loss;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    adjoint::reset_peak_memory_stats();
    const auto t0 = Clock::now();
    dp.zero_grad(opt);  // in place, as libtorch 1.13
    const auto t1 = Clock::now();
    Tensor loss;
    {
      std::optional<adjoint::Autocast> amp;
      autocast_forward(amp, o);
      loss = forward_loss();
    }
    const auto t2 = Clock::now();
    loss.backward();
    const auto t3 = Clock::now();
    dp.step(opt);
    const auto t4 = Clock::now();
    last_loss = loss.detach();
    loss = Tensor();
    const auto t5 = Clock::now();
    if (s == 0) first_loss = last_loss.item<double>();
    if (s >= o.warmup) {
      fwd.add(ms(t1, t2));
      bwd.add(ms(t2, t3));
      step.add(ms(t3, t4));
      total.add(ms(t0, t5));
      peak.add(static_cast<double>(adjoint::memory_stats().peak_bytes));
      dp.record(&opt);
    }
  }
  // One more (untimed) forward and backward, with saved tensors counted.
  const double saved_peak = saved_peak_bytes([&] {
    dp.zero_grad(opt);
    Tensor loss;
    {
      std::optional<adjoint::Autocast> amp;
      autocast_forward(amp, o);
      loss = forward_loss();
    }
    loss.backward();
  });
  const double tokens_per_step = static_cast<double>(kBatch * kCtx);
  const double mm_weights = 12.0 * kDModel * kDModel * kLayers + 1.0 * kVocab * kDModel;
  const double flops =
      6.0 * mm_weights * tokens_per_step + 12.0 * kLayers * kBatch * kCtx * kCtx * kDModel;
  common_fields(j, o, total);
  j.str("checkpoint", o.checkpoint);
  j.str("precision", o.precision);
  j.integer("peak_saved_bytes", static_cast<long long>(saved_peak));
  j.num("fwd_ms", fwd.median());
  j.num("bwd_ms", bwd.median());
  j.num("opt_ms", step.median());
  j.num("tokens_per_s", tokens_per_step / (total.median() * 1e-3));
  j.integer("params", model.num_parameters());
  j.num("flops_per_step", flops);
  j.num("gflops", flops / (total.median() * 1e6));
  j.num("first_loss", first_loss);
  j.num("loss", last_loss.item<double>());
  j.integer("peak_storage_bytes", static_cast<long long>(peak.median()));
  dp.report(j);
  if (o.compile) {
    const adjoint::CompileStats cs = compiled_loss.stats();
    const adjoint::CompiledMemoryPlan plan = compiled_loss.plan();
    j.integer("compile_traces", cs.traces);
    j.integer("compile_graph_breaks", cs.graph_breaks);
    j.integer("compile_nodes", plan.nodes);
    j.integer("compile_nodes_traced", plan.nodes_traced);
  }
}

static RegisterWorkload register_gpt_tiny{"gpt-tiny", gpt_tiny, 20};

}  // namespace
}  // namespace bench
