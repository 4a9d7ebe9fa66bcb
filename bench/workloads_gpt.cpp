// The `gpt-tiny` and `gpt-long` workloads: a training step of adjoint::nn::GPT (vocab 256,
// d 256, 4 heads, 4 layers) with AdamW, exactly as ../shared/bench/README.md defines them:
// gpt-tiny at context 128 and batch 16, gpt-long at context 1024 and batch 2 (the same 2,048
// tokens). Parameters and data come from adjoint's own seeded Generator, so values differ from
// libtorch but the work is the same. --attention math|fused picks the attention core: math is
// matmul / masked softmax / matmul (what torch-ref runs, and gpt-tiny's default), fused one
// scaled_dot_product_attention op (gpt-long's default). Both also report the allocator's peak
// live storage and the saved bytes of one step; gpt-long adds torch-ref's memory fields and
// the saved bytes of the attention core alone.
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "adjoint/optim.h"
#include "checkpoint_modes.h"
#include "data_parallel_mode.h"
#include "gemm_bound.h"
#include "report.h"

namespace bench {
namespace {

using adjoint::Tensor;

constexpr int64_t kVocab = 256, kDModel = 256, kHeads = 4, kLayers = 4;

// What the attention core of every block keeps for backward, from the graph behind a loss.
// The core's nodes are the ones that save a rank-4 tensor ([B, H, T, ·]: q, k, v seen per head,
// the probabilities, the fused op's output): nothing else in nn::GPT has rank 4. `all` counts
// every storage those nodes are first to hold; `beyond_inputs` leaves out what they hold as
// inputs (the q, k and v projections, which every attention path keeps, and the mask buffer),
// which is the part that depends on the path: the [B, H, T, T] probabilities on the math
// path, the output and one log-sum-exp per row on the fused one.
struct AttentionSaved {
  long long all = 0, beyond_inputs = 0;
};

AttentionSaved attention_saved(const adjoint::SavedTensorsSummary& summary) {
  AttentionSaved r;
  for (const auto& node : summary.nodes) {
    bool core = false;
    for (const auto& t : node.saved) core = core || t.shape.size() == 4;
    if (!core) continue;
    for (const auto& t : node.saved) {
      if (t.shared || t.freed) continue;
      const auto bytes = static_cast<long long>(t.storage_bytes);
      r.all += bytes;
      if (t.role != "input") r.beyond_inputs += bytes;
    }
  }
  return r;
}

// Workload sizes and whether to measure torch-ref's gpt-long memory fields.
struct GptShape {
  int64_t ctx, batch;
  bool long_memory;
};

// zero_grad (in place), forward + loss, backward, AdamW, teardown.
void gpt_train(const Opts& o, Json& j, GptShape shape) {
  const int64_t ctx = shape.ctx, batch = shape.batch;
  const std::string attention =
      !o.attention.empty() ? o.attention : (shape.long_memory ? "fused" : "math");
  adjoint::Generator gen(0);
  adjoint::nn::GPT model(adjoint::nn::GPTConfig{kVocab, ctx, kDModel, kHeads, kLayers, 0.0}, &gen);
  std::vector<std::shared_ptr<adjoint::nn::Block>> blocks;
  for (const auto& child : model.blocks->children())
    blocks.push_back(std::dynamic_pointer_cast<adjoint::nn::Block>(child));
  for (const auto& b : blocks) b->attn->fused = attention == "fused";
  const std::vector<Tensor> params = model.parameters();
  const Tensor tokens = adjoint::randint(0, kVocab, {batch, ctx + 1}, &gen);
  const adjoint::optim::AdamWOptions adamw{
      .lr = 3e-4, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
  adjoint::optim::AdamW opt(params, adamw);
  DataParallelMode dp(o, model, adamw);  // --data-parallel: this rank's rows, DDP (ZeRO)
  const Tensor inputs = dp.rows(tokens.slice(1, 0, ctx));
  const Tensor targets = dp.rows(tokens.slice(1, 1, ctx + 1));

  model.run_blocks = block_runner(o.checkpoint);
  // --compile: the forward and the loss as one compiled function (the parameters captured).
  const adjoint::CompiledFunction compiled_loss = adjoint::compile(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{model.loss(in[0], in[1])}; });
  auto forward_loss = [&] {
    std::optional<adjoint::Autocast> amp;
    autocast_forward(amp, o);
    return o.compile ? compiled_loss({inputs, targets})[0] : model.loss(inputs, targets);
  };
  // --compile-step: zero_grad, the loss, backward and AdamW as one compiled function; its
  // phases are not timed apart (fwd_ms, bwd_ms and opt_ms are 0).
  const adjoint::CompiledFunction compiled_step =
      adjoint::compile([&](const std::vector<Tensor>& in) {
        dp.zero_grad(opt);
        Tensor loss;
        {
          std::optional<adjoint::Autocast> amp;
          autocast_forward(amp, o);
          loss = model.loss(in[0], in[1]);
        }
        loss.backward();
        dp.step(opt);
        return std::vector<Tensor>{loss};
      });

  // gpt-long's malloc probe, as torch-ref's: glibc's bytes in use after every block and after
  // the loss, the growth over the value just before the forward (on untimed steps only).
  std::function<void()> probe;
  if (shape.long_memory)
    for (const auto& b : blocks)
      b->register_forward_hook([&probe](adjoint::nn::Module&, const Tensor&, const Tensor&) {
        if (probe) probe();
        return std::optional<Tensor>();
      });
  struct Mem {
    double malloc_mib = 0;   // glibc: the largest growth over the probes
    double storage_mib = 0;  // allocator: peak live storage during the forward, over the start
  };

  Samples fwd, bwd, step, total, peak;
  double first_loss = NAN;
  Tensor last_loss;
  auto run_step = [&](bool timed, Mem* mem) {
    adjoint::reset_peak_memory_stats();
    const auto t0 = Clock::now();
    if (o.compile_step && !mem) {
      last_loss = compiled_step({inputs, targets})[0];
      const auto t5 = Clock::now();
      if (std::isnan(first_loss)) first_loss = last_loss.item<double>();
      if (timed) {
        fwd.add(0);
        bwd.add(0);
        step.add(0);
        total.add(ms(t0, t5));
        peak.add(static_cast<double>(adjoint::memory_stats().peak_bytes));
      }
      return;
    }
    dp.zero_grad(opt);  // in place, as libtorch 1.13
    const auto t1 = Clock::now();
    double s0 = 0;
    if (mem) {
      s0 = static_cast<double>(adjoint::memory_stats().current_bytes);
      const double m0 = malloc_in_use_mib();
      probe = [mem, m0] { mem->malloc_mib = std::max(mem->malloc_mib, malloc_in_use_mib() - m0); };
    }
    Tensor loss = forward_loss();
    if (mem) {
      probe();
      probe = nullptr;
      mem->storage_mib = (static_cast<double>(adjoint::memory_stats().peak_bytes) - s0) / kMiB;
    }
    const auto t2 = Clock::now();
    loss.backward();
    const auto t3 = Clock::now();
    dp.step(opt);
    const auto t4 = Clock::now();
    last_loss = loss.detach();
    loss = Tensor();
    const auto t5 = Clock::now();
    if (std::isnan(first_loss)) first_loss = last_loss.item<double>();
    if (timed) {
      fwd.add(ms(t1, t2));
      bwd.add(ms(t2, t3));
      step.add(ms(t3, t4));
      total.add(ms(t0, t5));
      peak.add(static_cast<double>(adjoint::memory_stats().peak_bytes));
      dp.record(&opt);
    }
  };
  Mem cold;  // gpt-long: the process's first step
  for (int s = 0; s < o.warmup + o.steps; ++s)
    run_step(s >= o.warmup, shape.long_memory && s == 0 ? &cold : nullptr);
  Samples malloc_steady, storage_steady;  // gpt-long: 3 extra probed (untimed) steps
  for (int s = 0; shape.long_memory && s < 3; ++s) {
    Mem m;
    run_step(false, &m);
    malloc_steady.add(m.malloc_mib);
    storage_steady.add(m.storage_mib);
  }
  // One more (untimed) forward and backward, with saved tensors counted, and what the
  // attention cores hold, read off the graph between the two.
  AttentionSaved att;
  const double saved_peak = saved_peak_bytes([&] {
    dp.zero_grad(opt);
    Tensor loss = forward_loss();
    att = attention_saved(adjoint::saved_tensors_summary(loss));
    loss.backward();
  });
  const double tokens_per_step = static_cast<double>(batch * ctx);
  const double mm_weights = 12.0 * kDModel * kDModel * kLayers + 1.0 * kVocab * kDModel;
  const double flops =
      6.0 * mm_weights * tokens_per_step + 12.0 * kLayers * batch * ctx * ctx * kDModel;
  common_fields(j, o, total);
  report_gemm_bound(j, total.median(), [&] { run_step(false, nullptr); });
  j.str("attention", attention);
  j.str("checkpoint", o.checkpoint);
  j.str("precision", o.precision);
  j.integer("peak_saved_bytes", static_cast<long long>(saved_peak));
  j.integer("attention_saved_bytes", att.all);
  j.integer("attention_saved_beyond_inputs_bytes", att.beyond_inputs);
  j.num("fwd_ms", fwd.median());
  j.num("bwd_ms", bwd.median());
  j.num("opt_ms", step.median());
  j.num("tokens_per_s", tokens_per_step / (total.median() * 1e-3));
  j.integer("params", model.num_parameters());
  j.num("flops_per_step", flops);
  j.num("gflops", flops / (total.median() * 1e6));
  if (shape.long_memory) {
    // The float32 softmax outputs [B, H, T, T] of all layers that the math path keeps (as
    // torch-ref reports it; the fused path keeps none of them).
    j.num("attention_probs_mib_expected",
          4.0 * kLayers * batch * kHeads * ctx * ctx / (1024.0 * 1024.0));
    j.num("fwd_malloc_peak_growth_mib", malloc_steady.median());
    j.num("fwd_malloc_peak_growth_cold_mib", cold.malloc_mib);
    j.num("fwd_storage_peak_growth_mib", storage_steady.median());
    j.num("fwd_storage_peak_growth_cold_mib", cold.storage_mib);
  }
  j.num("first_loss", first_loss);
  j.num("loss", last_loss.item<double>());
  j.integer("peak_storage_bytes", static_cast<long long>(peak.median()));
  dp.report(j);
  if (o.compile_step) {
    const adjoint::CompileStats cs = compiled_step.stats();
    j.integer("compile_traces", cs.traces);
    j.integer("compile_graph_breaks", cs.graph_breaks);
    j.integer("compile_replays", cs.replays);
  }
  if (o.compile) {
    const adjoint::CompileStats cs = compiled_loss.stats();
    const adjoint::CompiledMemoryPlan plan = compiled_loss.plan();
    j.integer("compile_traces", cs.traces);
    j.integer("compile_graph_breaks", cs.graph_breaks);
    j.integer("compile_nodes", plan.nodes);
    j.integer("compile_nodes_traced", plan.nodes_traced);
  }
}

void gpt_tiny(const Opts& o, Json& j) { gpt_train(o, j, {128, 16, false}); }
void gpt_long(const Opts& o, Json& j) { gpt_train(o, j, {1024, 2, true}); }

static RegisterWorkload register_gpt_tiny{"gpt-tiny", gpt_tiny, 20};
static RegisterWorkload register_gpt_long{"gpt-long", gpt_long, 5};

}  // namespace
}  // namespace bench
