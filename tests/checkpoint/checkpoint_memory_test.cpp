// What checkpointing saves, as memory tracking (memory.h) measures it: checkpoint_sequential
// over a deep chain keeps a fraction of the plain chain's peak saved bytes, the recomputed
// tensors are counted while they are held, and nothing stays saved after backward.
#include <gtest/gtest.h>

#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/memory.h"

using namespace adjoint;

namespace {

struct Chain {
  std::vector<Tensor> weights;
  std::vector<CheckpointLayer> layers;
  Tensor x;
};

// 16 layers whose activations ([256, 32] float64, 64 KiB) dwarf their weights (8 KiB).
Chain make_chain() {
  Generator gen(1);
  Chain c;
  for (int i = 0; i < 16; ++i) {
    Tensor w = (randn({32, 32}, DType::Float64, &gen) * 0.2).requires_grad_(true);
    c.weights.push_back(w);
    c.layers.push_back([w](const Tensor& h) { return tanh(matmul(h, w)); });
  }
  c.x = randn({256, 32}, DType::Float64, &gen).requires_grad_(true);
  return c;
}

// Peak saved bytes over forward and backward, and the saved bytes left afterwards.
template <class Forward>
std::pair<std::size_t, std::size_t> measure(Forward&& forward) {
  SavedMemoryTracker tracker;
  const std::size_t before = saved_memory_stats().current_bytes;
  reset_peak_saved_memory_stats();
  forward().sum().backward();
  return {saved_memory_stats().peak_bytes - before, saved_memory_stats().current_bytes - before};
}

TEST(CheckpointMemory, SequentialKeepsAFractionOfThePeak) {
  Chain c = make_chain();
  const auto [plain_peak, plain_left] = measure([&] {
    Tensor h = c.x;
    for (const auto& layer : c.layers) h = layer(h);
    return h;
  });
  const auto [ckpt_peak, ckpt_left] =
      measure([&] { return checkpoint_sequential(c.layers, c.x); });  // 4 segments of 4
  EXPECT_EQ(plain_left, 0u);
  EXPECT_EQ(ckpt_left, 0u);
  // Plain: all 16 layers' activations at once. Checkpointed: the segment inputs, the last
  // segment's activations, then one recomputed segment at a time: well under half.
  EXPECT_LT(ckpt_peak * 2, plain_peak) << "checkpointed " << ckpt_peak << " plain " << plain_peak;
  // The recomputed tensors are counted: the peak covers at least one segment's activations.
  EXPECT_GE(ckpt_peak, 4u * 256 * 32 * 8);
}

}  // namespace
