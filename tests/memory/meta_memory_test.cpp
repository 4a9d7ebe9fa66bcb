// A forward and backward of gpt-tiny's model on the meta device counts the memory the same
// step holds on CPU (the oracle, measured): the saved activations to the byte, since both
// devices save the same tensors, and the peak of all storage within 5 % (CPU kernels make a few
// temporaries of their own that meta kernels do not). docs/devices.md.
#include <gtest/gtest.h>

#include <cstdio>

#include "adjoint/adjoint.h"
#include "adjoint/allocator.h"
#include "adjoint/memory.h"
#include "adjoint/nn/gpt.h"

namespace adjoint {
namespace {

struct StepMemory {
  std::size_t saved_peak = 0;    // saved activations, at their peak
  std::size_t storage_peak = 0;  // all storage the step added, at its peak
  std::size_t after = 0;         // storage the step left (the gradients)
};

StepMemory measure_step(Device device, bool autocast) {
  DeviceGuard guard(device);
  const nn::GPTConfig cfg{256, 128, 256, 4, 4};  // gpt-tiny
  nn::GPT model(cfg);
  const Tensor tokens = randint(0, cfg.vocab, {2, cfg.context});
  const Tensor targets = randint(0, cfg.vocab, {2 * cfg.context});
  const std::size_t before = memory_stats(device).current_bytes;
  reset_peak_memory_stats(device);
  StepMemory m;
  {
    SavedMemoryTracker tracker;
    Tensor loss;
    {
      Autocast cast(DType::BFloat16, autocast);
      loss = cross_entropy(model.forward(tokens).reshape({-1, cfg.vocab}), targets);
    }
    m.saved_peak = saved_memory_stats().peak_bytes;
    loss.backward();
  }
  m.storage_peak = memory_stats(device).peak_bytes - before;
  m.after = memory_stats(device).current_bytes - before;
  return m;
}

void expect_same_memory(bool autocast) {
  const StepMemory cpu = measure_step(kCPU, autocast);
  const StepMemory meta = measure_step(kMeta, autocast);
  EXPECT_GT(cpu.saved_peak, 1u << 20);
  EXPECT_EQ(meta.saved_peak, cpu.saved_peak);
  EXPECT_EQ(meta.after, cpu.after);
  const double ratio = static_cast<double>(meta.storage_peak) / cpu.storage_peak;
  std::printf("saved peak %zu bytes on both; storage peak cpu %zu, meta %zu (%.4f)\n",
              cpu.saved_peak, cpu.storage_peak, meta.storage_peak, ratio);
  EXPECT_GT(ratio, 0.95) << meta.storage_peak << " vs " << cpu.storage_peak;
  EXPECT_LT(ratio, 1.05) << meta.storage_peak << " vs " << cpu.storage_peak;
}

TEST(MetaMemory, GptTinyStepCountsTheCpuRunsBytes) { expect_same_memory(false); }

TEST(MetaMemory, GptTinyStepUnderBf16AutocastCountsTheCpuRunsBytes) { expect_same_memory(true); }

}  // namespace
}  // namespace adjoint
