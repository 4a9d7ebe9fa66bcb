// adjoint-train --estimate's numbers against the same step run on CPU (the oracle, measured
// with memory_stats and saved_memory_stats): the saved activations and the gradients to the
// byte, the step's peak within 5 %, the parameters and the optimizer's state exactly; and the
// report's advice when a run does not fit.
#include <gtest/gtest.h>

#include <map>
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

// The per-module rows: each is one module's weights, gradients and state, and what its
// forward saved and added at its peak. Oracles: the totals the rows add up to, and on CPU
// nn::summary's saved bytes per module and the allocator's peak over each module's forward.
TEST(MemoryEstimate, PerModuleRowsAddUpAndMatchTheCpuRun) {
  const TrainConfig c = tiny("gpt", "fp32", false, "none");
  const MemoryEstimate e = estimate_memory(c);
  std::map<std::string, const ModuleMemory*> by_name;
  int64_t parameters = 0;
  std::size_t gradients = 0, optimizer = 0;
  for (const ModuleMemory& m : e.modules) {
    by_name[m.name] = &m;
    parameters += m.count * m.parameters;
    gradients += static_cast<std::size_t>(m.count) * m.gradient_bytes;
    optimizer += static_cast<std::size_t>(m.count) * m.optimizer_bytes;
  }
  EXPECT_EQ(parameters, e.parameters);
  EXPECT_EQ(gradients, e.gradient_bytes);
  EXPECT_EQ(optimizer, e.optimizer_bytes);
  // The three blocks are alike: one row of three.
  ASSERT_TRUE(by_name.count("blocks.0-2")) << estimate_report(c, 0);
  EXPECT_EQ(by_name["blocks.0-2"]->count, 3);
  for (const char* name : {"wte", "wpe", "drop", "ln_f"})
    EXPECT_TRUE(by_name.count(name)) << name << " has no row:\n" << estimate_report(c, 0);

  // On CPU: the same model's forward under nn::summary, and each block's forward alone under
  // the allocator's peak.
  Generator gen(1);
  std::shared_ptr<nn::LanguageModel> model = make_model(c, &gen);
  model->train();
  const Tensor tokens = randint(0, 256, {c.batch, c.model.context}, &gen);
  const nn::ModelSummary s = nn::summary(*model, tokens);
  for (const nn::ModuleSummaryRow& row : s.rows) {
    std::string key = row.name;
    if (key.rfind("blocks.", 0) == 0 && key.find('.', 7) == std::string::npos) key = "blocks.0-2";
    if (row.depth == 0 || !by_name.count(key) || (key == "blocks.0-2" && row.depth != 2)) continue;
    EXPECT_EQ(by_name[key]->saved_bytes, row.saved_bytes) << row.name;
  }
  std::shared_ptr<nn::Module> block;
  for (const auto& [name, m] : model->named_modules())
    if (name == "blocks.0") block = m;
  ASSERT_NE(block, nullptr);
  const Tensor x = randn({c.batch, c.model.context, c.model.d_model}, DType::Float32, &gen);
  const std::size_t before = memory_stats().current_bytes;
  reset_peak_memory_stats();
  { const Tensor y = (*block)(x); }
  const std::size_t cpu_peak = memory_stats().peak_bytes - before;
  // The estimate sees storage at the end of each op; the allocator also sees a kernel's own
  // temporaries while it runs, so it can only be higher, and not by more than one op's
  // scratch.
  EXPECT_LE(by_name["blocks.0-2"]->forward_peak_bytes, cpu_peak);
  EXPECT_GE(by_name["blocks.0-2"]->forward_peak_bytes, cpu_peak / 2);
  // The report prints the table.
  EXPECT_NE(estimate_report(c, 0).find("blocks.0-2 (3x)"), std::string::npos);
}

}  // namespace
}  // namespace adjoint::tools
