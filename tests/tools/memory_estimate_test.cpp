// adjoint-train --estimate's numbers against the same step run on CPU (the oracle, measured
// with memory_stats and saved_memory_stats): the saved activations and the gradients to the
// byte, the step's peak within 5 %, the parameters and the optimizer's state exactly; and the
// report's advice when a run does not fit.
#include <gtest/gtest.h>

#include <string>

#include "adjoint/allocator.h"
#include "adjoint/memory.h"
#include "memory_estimate.h"

namespace adjoint::tools {
namespace {

TrainConfig tiny(const std::string& arch, const std::string& precision, bool masters,
                 const std::string& checkpoint) {
  TrainConfig c;
  c.arch = arch;
  c.model = {.vocab = 256, .context = 32, .d_model = 64, .heads = 4, .layers = 3};
  c.batch = 4;
  c.precision = precision;
  c.master_weights = masters;
  c.checkpoint = checkpoint;
  return c;
}

// The step on CPU as the Trainer runs it (model, autocast, checkpointing, loss, backward).
MemoryEstimate measure_on_cpu(const TrainConfig& config) {
  MemoryEstimate m;
  Generator gen(1);
  std::shared_ptr<nn::LanguageModel> model = make_model(config, &gen);
  const std::optional<DType> amp = autocast_dtype_of(config.precision);
  if (config.master_weights && amp) model->to(*amp);
  model->run_blocks = sequential_runner(config.checkpoint, nullptr, "test");
  model->train();
  for (const Tensor& p : model->parameters()) {
    m.parameters += p.numel();
    m.parameter_bytes += detail::block_bytes(p.nbytes());
  }
  const Tensor tokens = randint(0, 256, {config.batch, config.model.context}, &gen);
  const Tensor targets = randint(0, 256, {config.batch, config.model.context}, &gen);
  const std::size_t before = memory_stats().current_bytes;
  reset_peak_memory_stats();
  {
    SavedMemoryTracker tracker;
    Tensor loss;
    {
      std::optional<Autocast> cast;
      if (amp) cast.emplace(*amp);
      loss = model->loss(tokens, targets);
    }
    loss.backward();
    m.saved_peak_bytes = saved_memory_stats().peak_bytes;
  }
  m.step_peak_bytes = memory_stats().peak_bytes - before;
  m.gradient_bytes = memory_stats().current_bytes - before;
  return m;
}

void expect_estimate_matches_cpu(const TrainConfig& config) {
  const MemoryEstimate e = estimate_memory(config);
  const MemoryEstimate cpu = measure_on_cpu(config);
  SCOPED_TRACE(config.arch + " " + config.precision + " checkpoint " + config.checkpoint);
  EXPECT_EQ(e.parameters, cpu.parameters);
  EXPECT_EQ(e.parameter_bytes, cpu.parameter_bytes);
  EXPECT_EQ(e.saved_peak_bytes, cpu.saved_peak_bytes);
  EXPECT_EQ(e.gradient_bytes, cpu.gradient_bytes);
  EXPECT_NEAR(static_cast<double>(e.step_peak_bytes), static_cast<double>(cpu.step_peak_bytes),
              0.05 * static_cast<double>(cpu.step_peak_bytes));
  // AdamW's two float32 moments per parameter.
  std::size_t moments = 0;
  DeviceGuard meta(kMeta);
  for (const Tensor& p : make_model(config, nullptr)->parameters())
    moments += 2 * detail::block_bytes(p.numel() * sizeof(float));
  EXPECT_EQ(e.optimizer_bytes, moments);
}

TEST(MemoryEstimate, GptStepMatchesTheCpuRun) {
  expect_estimate_matches_cpu(tiny("gpt", "fp32", false, "none"));
  expect_estimate_matches_cpu(tiny("gpt", "fp32", false, "block"));
}

TEST(MemoryEstimate, LlamaBf16StepMatchesTheCpuRun) {
  expect_estimate_matches_cpu(tiny("llama", "bf16", false, "none"));
  expect_estimate_matches_cpu(tiny("llama", "bf16", true, "sqrt"));
}

TEST(MemoryEstimate, CheckpointingSavesLessAndTheEstimateSaysSo) {
  const MemoryEstimate plain = estimate_memory(tiny("gpt", "fp32", false, "none"));
  const MemoryEstimate block = estimate_memory(tiny("gpt", "fp32", false, "block"));
  EXPECT_LT(block.saved_peak_bytes, plain.saved_peak_bytes);
  EXPECT_EQ(block.gradient_bytes, plain.gradient_bytes);
}

TEST(MemoryEstimate, TheReportSaysWhetherItFitsAndWhatWouldMakeItFit) {
  const TrainConfig c = tiny("gpt", "fp32", false, "none");
  const MemoryEstimate e = estimate_memory(c);
  EXPECT_NE(estimate_report(c, e.total_peak_bytes() * 2).find("fits this machine"),
            std::string::npos);
  // Between the block-checkpointed total and the plain one: checkpointing is the advice.
  TrainConfig blocks = c;
  blocks.checkpoint = "block";
  const std::size_t with_blocks = estimate_memory(blocks).total_peak_bytes();
  ASSERT_LT(with_blocks, e.total_peak_bytes());
  const std::string tight = estimate_report(c, with_blocks);
  EXPECT_NE(tight.find("does NOT fit"), std::string::npos) << tight;
  EXPECT_NE(tight.find("--checkpoint block"), std::string::npos) << tight;
  // Below what any checkpoint mode gives, but above the weights: sharding is the advice.
  const std::string shard = estimate_report(c, e.parameter_bytes + e.gradient_bytes);
  EXPECT_NE(shard.find("--zero"), std::string::npos) << shard;
  EXPECT_LE(e.per_rank_bytes(2, 1024), e.parameter_bytes + e.gradient_bytes);
}

}  // namespace
}  // namespace adjoint::tools
