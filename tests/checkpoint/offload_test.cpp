// SaveOnDisk and SaveAsBFloat16: round trips (exact on disk, rounded to nearest even in
// bfloat16), the memory they take off the heap, and the temporary file never left behind.
#include "adjoint/offload.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {

// A fresh directory, removed at the end.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    path = std::filesystem::temp_directory_path() /
           ("adjoint_offload_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  bool empty() const { return std::filesystem::is_empty(path); }
};

// Eight exp layers over 1 MB tensors: each saves its output (1 MB) for backward.
Tensor deep_exp(const Tensor& x, const Tensor& w) {
  Tensor h = x * w;
  for (int i = 0; i < 8; ++i) h = exp(h * 0.25);
  return h.sum();
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>();
}

constexpr double kMB = 1 << 20;

// The input of both offload tests, and deep_exp's plain graph as the baseline: w_plain and
// w_offloaded are two copies of the same weight, so the two runs' gradients can be compared.
struct OffloadCase {
  Tensor x, w_plain, w_offloaded;
  std::size_t base = 0;  // storage bytes before either graph
  double plain_mb = 0;   // what deep_exp's plain graph holds

  explicit OffloadCase(uint64_t seed) {
    Generator gen(seed);
    x = randn({256, 1024}, DType::Float32, &gen) * 0.1;
    w_plain = ones({1024}).requires_grad_(true);
    w_offloaded = ones({1024}).requires_grad_(true);
    base = memory_stats().current_bytes;
    Tensor plain = deep_exp(x, w_plain);
    plain_mb = (memory_stats().current_bytes - base) / kMB;
    plain.backward();
  }
  double mb_since_base() const { return (memory_stats().current_bytes - base) / kMB; }
};

}  // namespace

TEST(SaveOnDisk, RoundTripIsExactAndTakesActivationsOffTheHeap) {
  ScratchDir dir;
  const OffloadCase c(0);
  const Tensor &x = c.x, &w1 = c.w_plain, &w2 = c.w_offloaded;
  const double plain_mb = c.plain_mb;

  std::size_t written = 0;
  double disk_mb = 0;
  Tensor spilled;
  {
    SaveOnDisk guard(dir.path.string());
    spilled = deep_exp(x, w2);
    disk_mb = c.mb_since_base();
    written = guard.bytes_written();
    EXPECT_TRUE(dir.empty());  // the file has no name
  }
  spilled.backward();  // after the guard: the file lives as long as the graph needs it
  EXPECT_TRUE(same(w1.grad(), w2.grad()));
  EXPECT_GE(written, 8 * 1024 * 1024);  // the eight exp outputs (and x, saved by the product)
  EXPECT_GT(plain_mb, 8.0);
  EXPECT_LT(disk_mb, 1.0) << "plain " << plain_mb << " MB";
  EXPECT_TRUE(dir.empty());
}

TEST(SaveOnDisk, KeptTensorsStayInMemory) {
  ScratchDir dir;
  Generator gen(1);
  Tensor w = randn({512, 512}, DType::Float32, &gen).requires_grad_(true);
  Tensor x = randn({4, 512}, DType::Float32, &gen).requires_grad_(true);
  std::size_t with_w = 0, without_w = 0;
  {
    SaveOnDisk guard(dir.path.string());
    matmul(x, w).sum().backward();
    with_w = guard.bytes_written();
  }
  {
    SaveOnDisk guard(dir.path.string(), {w});
    matmul(x, w).sum().backward();
    without_w = guard.bytes_written();
  }
  EXPECT_EQ(with_w - without_w, 512u * 512u * 4u);
}

TEST(SaveOnDisk, NothingIsLeftBehindAfterAnError) {
  ScratchDir dir;
  Tensor a = ones({3}).requires_grad_(true);
  try {
    SaveOnDisk guard(dir.path.string());
    Tensor y = exp(a);
    (void)(y + ones({4}));  // a broadcast error while the guard is alive
    FAIL() << "expected a shape error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Shape);
  }
  EXPECT_TRUE(dir.empty());
}

TEST(SaveOnDisk, AMissingDirectoryIsAClearError) {
  expect_error([] { SaveOnDisk guard("/nonexistent/adjoint/dir"); }, ErrorKind::IO,
               {"save_on_disk", "/nonexistent/adjoint/dir"});
}

TEST(SaveAsBFloat16, RoundsToNearestEven) {
  // Each x is saved by the product (w needs its gradient), so w.grad() is x as bfloat16.
  const float e = std::ldexp(1.0f, -8);  // half a bfloat16 ulp at 1
  Tensor x = tensor(std::vector<float>{1 + e, 1 + 3 * e, 1 + e * 1.5f, -2.5f, 0.0f, 1e-30f});
  Tensor w = ones({6}).requires_grad_(true);
  {
    SaveAsBFloat16 guard;
    (x * w).sum().backward();
  }
  const float ulp = 2 * e;
  // ties go to the even neighbour; above the tie rounds up; exact values stay exact
  adjoint::testing::expect_values(w.grad().slice(0, 0, 5), {1.0, 1 + 2 * ulp, 1 + ulp, -2.5, 0.0},
                                  0);
  EXPECT_NEAR(w.grad().to_vector<double>()[5], 1e-30, 1e-30 * std::ldexp(1.0, -8));
}

TEST(SaveAsBFloat16, HalvesSavedBytesWithSmallGradientError) {
  const OffloadCase c(2);
  const Tensor &x = c.x, &w1 = c.w_plain, &w2 = c.w_offloaded;
  const double plain_mb = c.plain_mb;
  Tensor small;
  SavedMemoryStats saved;
  {
    SavedMemoryTracker tracker;
    SaveAsBFloat16 guard;
    small = deep_exp(x, w2);
    saved = saved_memory_stats();
  }
  const double bf16_mb = c.mb_since_base();
  // The saved-memory accounting sees the bfloat16 copies: the eight exp outputs' and x's,
  // 0.5 MB each, and w's (2 KB).
  EXPECT_NEAR(saved.current_bytes / kMB, 4.5, 0.01);
  small.backward();
  // The plain graph holds the eight 1 MB exp outputs (x, saved by the product, is the
  // caller's); with the guard they are 0.5 MB bfloat16 copies each, plus a 0.5 MB copy of x.
  EXPECT_GT(plain_mb, 7.9);
  EXPECT_NEAR(bf16_mb, plain_mb / 2 + 0.5, 0.6) << "plain " << plain_mb << " MB";
  // Normwise: single entries of w's gradient sum terms of both signs and may nearly cancel.
  const std::vector<double> a = w1.grad().to_vector<double>(), b = w2.grad().to_vector<double>();
  double err = 0, norm = 0;
  bool differs = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    err += (a[i] - b[i]) * (a[i] - b[i]);
    norm += a[i] * a[i];
    differs |= a[i] != b[i];
  }
  const double worst = std::sqrt(err / norm);
  EXPECT_TRUE(differs);    // it is lossy ...
  EXPECT_LT(worst, 2e-2);  // ... by a few bfloat16 roundings (2^-9 each) over nine factors
}

TEST(SaveAsBFloat16, BoolMasksComeBackAsTheyWere) {
  Tensor x = tensor(std::vector<float>{1.0f, -2.0f, 3.0f, -4.0f}).requires_grad_(true);
  Tensor mask = tensor(std::vector<bool>{true, false, true, false});
  Tensor y;
  {
    SaveAsBFloat16 guard;
    y = where(mask, x, 0.0).sum();
  }
  y.backward();
  adjoint::testing::expect_values(x.grad(), {1, 0, 1, 0}, 0);
}

TEST(SaveAsBFloat16, ShrunkTensorsAreBFloat16AndBFloat16OnesComeBackUnchanged) {
  Generator gen(4);
  // A float32 tensor is kept as a bfloat16 one (two bytes an element, counted as such) and
  // comes back as float32; the oracle rounds with the dtype's own conversion.
  Tensor x = randn({3, 7}, DType::Float32, &gen);
  Tensor w = ones({3, 7}).requires_grad_(true);
  Tensor y;
  SavedMemoryStats saved;
  {
    SavedMemoryTracker tracker;
    SaveAsBFloat16 guard;
    y = (x * w).sum();
    saved = saved_memory_stats();
  }
  EXPECT_EQ(saved.current_bytes, 2 * 2 * x.numel());  // the bfloat16 copies of x and w
  y.backward();
  ASSERT_EQ(w.grad().dtype(), DType::Float32);
  EXPECT_TRUE(same(w.grad(), x.to(DType::BFloat16).to(DType::Float32)));
  // A bfloat16 model's saved tensors are already bfloat16 and pass through bit for bit, even a
  // last dim of 2 (the kept view appends a stride-0 dim of 2 to tell them apart).
  for (const Shape& shape : {Shape{4, 2}, Shape{5}, Shape{}}) {
    Tensor xb = randn(shape, DType::Float32, &gen).to(DType::BFloat16);
    Tensor wb = ones(shape, DType::BFloat16).requires_grad_(true);
    {
      SaveAsBFloat16 guard;
      (xb * wb).sum().backward();
    }
    ASSERT_EQ(wb.grad().dtype(), DType::BFloat16);
    EXPECT_TRUE(same(wb.grad(), xb)) << shape;
  }
}

TEST(SaveAsBFloat16, OtherDtypesAndKeptTensorsAreExact) {
  Generator gen(3);
  Tensor x64 = randn({5}, DType::Float64, &gen);
  Tensor w64 = ones({5}, DType::Float64).requires_grad_(true);
  Tensor x32 = randn({5}, DType::Float32, &gen);
  Tensor w32 = ones({5}).requires_grad_(true);
  {
    SaveAsBFloat16 guard({x32});
    (x64 * w64).sum().backward();
    (x32 * w32).sum().backward();
  }
  EXPECT_TRUE(same(w64.grad(), x64));
  EXPECT_TRUE(same(w32.grad(), x32));
}
