// Live and peak bytes of saved tensors (memory.h): hand-computed sums for known graphs, the
// drop as backward frees nodes, peak and reset, one count per storage (views, several nodes),
// saved-tensor hooks, custom functions, tracking on and off, and memory_usage().
#include <gtest/gtest.h>

#include <vector>

#include "adjoint/adjoint.h"
#include "support/cube_function.h"
#include "support/expect.h"

using namespace adjoint;

namespace {

constexpr int64_t kN = 1024;
constexpr std::size_t kF32 = 4 * kN;  // bytes of one float32 [kN] tensor

Tensor leaf() { return randn({kN}).requires_grad_(true); }

std::size_t saved_now() { return saved_memory_stats().current_bytes; }

TEST(SavedMemory, ExpSavesItsOutput) {
  SavedMemoryTracker tracking;
  Tensor x = leaf();
  Tensor y = exp(x);  // d exp = exp: saves y
  EXPECT_EQ(saved_now(), kF32);
  EXPECT_EQ(saved_memory_stats().tensors, 1u);
  EXPECT_EQ(saved_memory_stats().storages, 1u);
  y = Tensor();  // the graph dies with its last handle
  EXPECT_EQ(saved_now(), 0u);
  EXPECT_EQ(saved_memory_stats().tensors, 0u);
}

TEST(SavedMemory, KnownGraphEqualsHandSum) {
  SavedMemoryTracker tracking;
  Tensor x = leaf();
  Tensor a = exp(x);  // saves a
  Tensor b = sin(a);  // saves a again: same storage, no new bytes
  Tensor c = b * x;   // saves b and x
  Tensor loss = c.sum();
  EXPECT_EQ(saved_now(), 3 * kF32);
  EXPECT_EQ(saved_memory_stats().tensors, 4u);
  EXPECT_EQ(saved_memory_stats().storages, 3u);

  // Read the live bytes from inside backward: a hook on a's gradient runs just before
  // ExpBackward, after SumBackward, MulBackward and SinBackward freed what they saved.
  std::size_t before_exp_backward = 0;
  a.register_hook([&](const Tensor&) {
    before_exp_backward = saved_now();
    return Tensor();
  });
  loss.backward();
  EXPECT_EQ(before_exp_backward, kF32);  // only exp's output is left
  EXPECT_EQ(saved_now(), 0u);
  EXPECT_EQ(saved_memory_stats().peak_bytes, 3 * kF32);
}

TEST(SavedMemory, RetainGraphKeepsSavedBytes) {
  SavedMemoryTracker tracking;
  Tensor x = leaf();
  Tensor loss = (exp(x) * x).sum();  // exp saves its output e; mul saves e (again) and x
  EXPECT_EQ(saved_now(), 2 * kF32);
  loss.backward({}, /*retain_graph=*/true);
  EXPECT_EQ(saved_now(), 2 * kF32);
  loss.backward();
  EXPECT_EQ(saved_now(), 0u);
}

TEST(SavedMemory, PeakAndReset) {
  SavedMemoryTracker tracking;
  reset_peak_saved_memory_stats();
  Tensor x = leaf();
  {
    Tensor loss = (exp(x) * exp(x)).sum();  // two exp outputs, saved again by mul
    EXPECT_EQ(saved_memory_stats().peak_bytes, 2 * kF32);
    loss.backward();
  }
  EXPECT_EQ(saved_now(), 0u);
  EXPECT_EQ(saved_memory_stats().peak_bytes, 2 * kF32);  // peak stays until reset
  reset_peak_saved_memory_stats();
  EXPECT_EQ(saved_memory_stats().peak_bytes, 0u);
  Tensor y = exp(x);
  EXPECT_EQ(saved_memory_stats().peak_bytes, kF32);
  y = Tensor();
  EXPECT_EQ(saved_memory_stats().peak_bytes, kF32);
}

TEST(SavedMemory, SharedStorageCountsOnce) {
  SavedMemoryTracker tracking;
  Tensor x = leaf();
  Tensor sq = x * x;  // mul saves x twice
  EXPECT_EQ(saved_now(), kF32);
  EXPECT_EQ(saved_memory_stats().tensors, 2u);
  EXPECT_EQ(saved_memory_stats().storages, 1u);

  // Views: sin saves its input; a saved half keeps the whole storage alive, and a second
  // view of the same storage adds nothing.
  Tensor y = x * 2.0;  // saves nothing
  Tensor s1 = sin(y.slice(0, 0, kN / 2));
  EXPECT_EQ(saved_now(), 2 * kF32);
  Tensor s2 = sin(y.slice(0, kN / 2, kN));
  Tensor s3 = cos(y);
  EXPECT_EQ(saved_now(), 2 * kF32);
  EXPECT_EQ(saved_memory_stats().storages, 2u);
  EXPECT_EQ(saved_memory_stats().tensors, 5u);
  s1 = Tensor();
  s3 = Tensor();
  EXPECT_EQ(saved_now(), 2 * kF32);  // s2 still holds y's storage
  s2 = Tensor();
  EXPECT_EQ(saved_now(), kF32);
}

TEST(SavedMemory, Float64AndScalars) {
  SavedMemoryTracker tracking;
  Tensor x = randn({kN}, TensorOptions(DType::Float64)).requires_grad_(true);
  Tensor y = exp(x);
  EXPECT_EQ(saved_now(), 8 * kN);
  Tensor s = scalar_tensor(2.0, DType::Float64).requires_grad_(true);
  Tensor z = s * s;  // a 0-d tensor: 8 bytes
  EXPECT_EQ(saved_now(), 8 * kN + 8);
}

TEST(SavedMemory, NothingCountedWhileOff) {
  ASSERT_FALSE(saved_memory_tracking());
  Tensor x = leaf();
  Tensor loss = exp(x).sum();  // saved while nobody looks
  {
    SavedMemoryTracker tracking;
    EXPECT_TRUE(saved_memory_tracking());
    EXPECT_EQ(saved_now(), 0u);
    Tensor z = sin(x);  // counted
    EXPECT_EQ(saved_now(), kF32);
    loss.backward();  // frees a tensor that was never counted: no underflow
    EXPECT_EQ(saved_now(), kF32);
  }
  EXPECT_FALSE(saved_memory_tracking());
  EXPECT_EQ(saved_now(), 0u);  // z's graph died with the scope
}

TEST(SavedMemory, TrackersNestAndTheFirstResetsThePeak) {
  Tensor x = leaf();
  {
    SavedMemoryTracker outer;
    Tensor y = exp(x);
    {
      SavedMemoryTracker inner;  // not the first: the peak stays
      EXPECT_EQ(saved_memory_stats().peak_bytes, kF32);
    }
    EXPECT_TRUE(saved_memory_tracking());
  }
  EXPECT_FALSE(saved_memory_tracking());
  SavedMemoryTracker again;  // the first again: peak = current = 0
  EXPECT_EQ(saved_memory_stats().peak_bytes, 0u);
}

TEST(SavedMemory, PackHooksCountWhatTheyKeep) {
  SavedMemoryTracker tracking;
  Tensor x = leaf();
  {
    // A hook keeping a float64 copy holds 8 bytes per element, not the 4 of the original.
    SavedTensorHooks widen(
        [](const Tensor& t) { return std::any(t.to(DType::Float64)); },
        [](const std::any& a) { return std::any_cast<Tensor>(a).to(DType::Float32); });
    Tensor y = exp(x);
    EXPECT_EQ(saved_now(), 8 * kN);
  }
  EXPECT_EQ(saved_now(), 0u);
  {
    // A hook keeping the values outside any tensor storage: nothing is counted.
    SavedTensorHooks elsewhere([](const Tensor& t) { return std::any(t.to_vector<float>()); },
                               [](const std::any& a) {
                                 return tensor(std::any_cast<std::vector<float>>(a), Shape({kN}));
                               });
    Tensor loss = exp(x).sum();
    EXPECT_EQ(saved_now(), 0u);
    loss.backward();
  }
}

using adjoint::testing::Cube;  // y = x^3, dy/dx = 3x^2 written by hand

TEST(SavedMemory, CustomFunctionsCount) {
  SavedMemoryTracker tracking;
  Tensor x = leaf();
  Tensor loss = Cube::apply(x).sum();
  EXPECT_EQ(saved_now(), kF32);
  loss.backward();
  EXPECT_EQ(saved_now(), 0u);
}

TEST(SavedMemory, UsageReportsStorageFromTheAllocator) {
  SavedMemoryTracker tracking;
  reset_peak_memory_usage();
  const MemoryUsage before = memory_usage();
  EXPECT_EQ(before.storage_bytes, memory_stats().current_bytes);
  EXPECT_EQ(before.storage_peak_bytes, before.storage_bytes);
  Tensor x = leaf();  // kF32 = 4096 bytes: exactly one allocator size class
  Tensor y = exp(x);
  const MemoryUsage after = memory_usage();
  EXPECT_EQ(after.storage_bytes, before.storage_bytes + 2 * kF32);
  EXPECT_EQ(after.saved_bytes, kF32);
  EXPECT_EQ(after.saved_peak_bytes, kF32);
  y = Tensor();
  x = Tensor();
  reset_peak_memory_usage();
  const MemoryUsage reset = memory_usage();
  EXPECT_EQ(reset.storage_peak_bytes, reset.storage_bytes);
  EXPECT_EQ(reset.saved_peak_bytes, 0u);
}

}  // namespace
