// In-place ops on the direct path (nothing recorded): values against hand computation,
// alpha scaling, broadcasting of the operand, the dtype rules, and the version bump.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "adjoint/adjoint.h"

using namespace adjoint;

TEST(InplaceDirect, AddSubWithAlphaAndBroadcast) {
  Tensor a = tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = tensor({10, 20, 30});
  const uint64_t v0 = a.version();
  a.add_(row, 0.5);  // a += 0.5 * row, row broadcast over the two rows
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{6, 12, 18, 9, 15, 21}));
  a.sub_(row, 0.1);
  std::vector<float> got = a.to_vector<float>();
  std::vector<float> want = {5, 10, 15, 8, 13, 18};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(got[i], want[i], 1e-5);
  a.mul_(2).div_(4).add_(1);
  got = a.to_vector<float>();
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(got[i], want[i] / 2 + 1, 1e-5);
  EXPECT_EQ(a.version(), v0 + 5);
}

TEST(InplaceDirect, OptimizerStyleUpdateUnderNoGrad) {
  Tensor p = tensor({1.0, -2.0}).requires_grad_(true);
  (p * p).sum().backward();  // grad = 2p
  {
    NoGradGuard no_grad;
    p.sub_(p.grad(), 0.25);  // p - 0.25 * 2p = p / 2
  }
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{0.5f, -1.0f}));
  EXPECT_TRUE(p.is_leaf());
}

TEST(InplaceDirect, DtypeRules) {
  Tensor f = zeros({3});
  f.add_(ones({3}, DType::Float64));  // narrowing within floating point is allowed
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{1, 1, 1}));
  Tensor i = zeros({3}, DType::Int64);
  i.add_(2);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_THROW(i.add_(ones({3})), Error);  // a float result cannot go into int64
  EXPECT_THROW(i.mul_(0.5), Error);
  EXPECT_THROW(zeros({3}).add_(ones({2, 3})), Error);  // the operand must broadcast to self
}

TEST(InplaceDirect, FillZeroCopyAndClamp) {
  Tensor a = tensor({-3, -1, 2, 5});
  a.clamp_(-2.0, 3.0);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{-2, -1, 2, 3}));
  a.fill_(7);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{7, 7, 7, 7}));
  a.copy_(tensor({1, 2, 3, 4}, DType::Float64));
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  a.zero_();
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
  // Writing through a view changes the base.
  Tensor m = zeros({2, 3});
  m.select(0, 1).fill_(1);
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{0, 0, 0, 1, 1, 1}));
}

// A contiguous copy within one dtype is one memmove per thread's range: every bit arrives,
// across the ranges' boundaries (2^20 + 3 elements span several), NaN payloads and -0 included,
// for each element size.
TEST(InplaceDirect, ContiguousCopiesKeepEveryBit) {
  const int64_t n = (int64_t{1} << 20) + 3;
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i % 1000) - 500.5;
  v[0] = -0.0;
  v[n - 1] = std::nan("0x5");
  for (DType dt : {DType::Float64, DType::Float32, DType::BFloat16, DType::Int64}) {
    if (dt == DType::Int64) v[0] = 0, v[n - 1] = 7;
    Tensor src = tensor(v).to(dt);
    Tensor cloned = src.clone();
    Tensor dst = zeros({n}, dt);
    dst.copy_(src);
    const std::vector<double> want = src.to_vector<double>();
    for (const Tensor& got : {cloned, dst}) {
      const std::vector<double> g = got.to_vector<double>();
      ASSERT_EQ(g.size(), want.size());
      EXPECT_EQ(std::memcmp(g.data(), want.data(), g.size() * sizeof(double)), 0) << to_string(dt);
    }
    cloned.fill_(1);  // a buffer of its own
    EXPECT_EQ(src.to_vector<double>()[1], want[1]);
  }
}
