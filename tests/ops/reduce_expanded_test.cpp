// Reductions over expanded inputs read each unique element once (Note [Reducing repeated
// elements] in src/backend/cpu/reduce.cpp). The oracle is the same reduction over the
// materialised (contiguous) copy, and for the huge expands, which cannot be materialised,
// arithmetic on the repeated value.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "adjoint/adjoint.h"

using namespace adjoint;

namespace {

constexpr int64_t k40 = int64_t{1} << 40;

// x of shape [3, 1, 4] expanded to [3, 5, 4]: dim 1 repeats, dims 0 and 2 do not.
Tensor expanded(DType dtype) {
  Generator gen(11);
  Tensor x =
      dtype == DType::Int64 ? randint(-4, 5, {3, 1, 4}, &gen) : randn({3, 1, 4}, dtype, &gen);
  return x.expand({3, 5, 4});
}

// Same shape and bitwise the same values (NaN equal to NaN), or within rtol when rtol > 0.
::testing::AssertionResult same(const Tensor& got, const Tensor& want, double rtol = 0) {
  if (got.shape() != want.shape() || got.dtype() != want.dtype())
    return ::testing::AssertionFailure() << "shape or dtype differ: " << got << " vs " << want;
  const std::vector<double> g = got.to(DType::Float64).to_vector<double>();
  const std::vector<double> w = want.to(DType::Float64).to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    const bool ok = (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] ||
                    std::abs(g[i] - w[i]) <= rtol * std::abs(w[i]);
    if (!ok) return ::testing::AssertionFailure() << "at " << i << ": " << g[i] << " vs " << w[i];
  }
  return ::testing::AssertionSuccess();
}

const std::vector<std::vector<int64_t>> kDimSets = {{}, {1}, {0, 1}, {1, 2}, {0}, {2}, {0, 2}};

}  // namespace

TEST(ReduceExpanded, EqualsTheReductionOfTheMaterialisedCopy) {
  for (DType dtype : {DType::Float32, DType::Float64, DType::Int64, DType::BFloat16}) {
    const Tensor e = expanded(dtype);
    const Tensor c = e.contiguous();
    ASSERT_EQ(e.strides()[1], 0);
    for (const auto& dims : kDimSets) {
      for (bool keepdim : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << to_string(dtype) << " dims " << dims.size() << " "
                     << (dims.empty() ? -1 : dims[0]) << " keepdim " << keepdim);
        // extrema are exact whatever the order
        EXPECT_TRUE(same(amax(e, dims, keepdim), amax(c, dims, keepdim)));
        EXPECT_TRUE(same(amin(e, dims, keepdim), amin(c, dims, keepdim)));
        // the values are small integers or float32-sized: the double accumulator is exact for
        // both orders, except float64's, which may round differently
        // both orders, except float64's; products of many values round in either order
        const double sum_tol = dtype == DType::Float64 ? 1e-14 : 0;
        EXPECT_TRUE(same(sum(e, dims, keepdim), sum(c, dims, keepdim), sum_tol));
        const double prod_tol = dtype == DType::Int64 ? 0 : dtype == DType::Float64 ? 1e-14 : 1e-6;
        EXPECT_TRUE(same(prod(e, dims, keepdim), prod(c, dims, keepdim), prod_tol));
      }
    }
    for (int64_t d = 0; d < 3; ++d) {
      EXPECT_TRUE(same(argmax(e, d), argmax(c, d)));
      EXPECT_TRUE(same(argmin(e, d, true), argmin(c, d, true)));
      EXPECT_TRUE(same(e.max(d).first, c.max(d).first));
      EXPECT_TRUE(same(e.min(d).second, c.min(d).second));
    }
    EXPECT_TRUE(same(e.max(), c.max()));
    EXPECT_TRUE(same(e.min(), c.min()));
  }
}

TEST(ReduceExpanded, NaNAndTiesAlongARepeatedDimBehaveAsTheLoop) {
  Tensor x = tensor({1.0, NAN, -2.0}, {3, 1}).expand({3, 4});
  Tensor c = x.contiguous();
  for (int64_t d : {0, 1}) {
    EXPECT_TRUE(same(argmax(x, d), argmax(c, d)));
    EXPECT_TRUE(same(argmin(x, d), argmin(c, d)));
    EXPECT_TRUE(same(amax(x, {d}), amax(c, {d})));
  }
  EXPECT_TRUE(std::isnan(x.max().item<double>()));
}

TEST(ReduceExpanded, AHugeExpandIsReducedInOneElementsTime) {
  // Found by fuzz_ops: max() over a [1, 2^40] expand read 2^40 elements (minutes). The oracle
  // is arithmetic on the one repeated value.
  const Tensor big = full({}, 2.5).expand({1, k40});
  EXPECT_EQ(big.max().item<double>(), 2.5);
  EXPECT_EQ(big.min().item<double>(), 2.5);
  EXPECT_EQ(amax(big, {1}).item<double>(), 2.5);
  EXPECT_EQ(argmax(big, 1).item<int64_t>(), 0);
  EXPECT_EQ(big.max(1).second.item<int64_t>(), 0);
  EXPECT_EQ(big.sum().item<double>(), 2.5 * static_cast<double>(k40));  // exact in float32
  EXPECT_EQ(big.mean().item<double>(), 2.5);
  EXPECT_EQ(ones({1}).expand({k40}).prod().item<double>(), 1.0);
  EXPECT_TRUE(std::isinf(full({}, 2.0).expand({k40}).prod().item<double>()));
  // integers wrap as the element-by-element loop would: 7 * 2^40, and 3^(2^40) mod 2^64
  const Tensor ints = full({}, 7.0, DType::Int64).expand({k40});
  EXPECT_EQ(ints.sum().item<int64_t>(), 7 * k40);
  uint64_t want = 1, base = 3;
  for (int64_t n = k40; n > 0; n >>= 1, base *= base)
    if (n & 1) want *= base;
  EXPECT_EQ(full({}, 3.0, DType::Int64).expand({k40}).prod().item<int64_t>(),
            static_cast<int64_t>(want));
  // 16-bit inputs are widened to float32 over their unique elements only
  for (DType low : {DType::BFloat16, DType::Float16}) {
    const Tensor half = full({}, 2.5, low).expand({1, k40});
    EXPECT_EQ(half.max().item<double>(), 2.5);
    EXPECT_EQ(half.min().item<double>(), 2.5);
    EXPECT_EQ(argmax(half, 1).item<int64_t>(), 0);
  }
  // the gradient of a sum over it is an expand too, never materialised
  Tensor x = full({1}, 2.5).requires_grad_(true);
  x.expand({k40}).sum().backward();
  EXPECT_EQ(x.grad().item<double>(), static_cast<double>(k40));
}
