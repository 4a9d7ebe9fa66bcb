// Numbers converted to element types and to int64 without undefined behaviour: Scalar keeps a
// floating number as a double (no eager int64 cast of inf or NaN), fill values are converted
// as PyTorch's checked_convert does (NaN, inf or out-of-range into int64 and finite overflow
// into float32 are named errors, bool takes anything), tensor casts and item() of NaN give a
// defined INT64_MIN, and arange refuses a range too large for a tensor. The sanitizer build
// (-fsanitize=float-cast-overflow) runs these paths; the oracle is the C++ value.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();
}  // namespace

TEST(ScalarConversion, FloatingScalarsKeepTheirValueAndConvertToIntOnlyWhenTheyFit) {
  for (double v : {kNaN, kInf, -kInf, 1e300, -9.3e18}) {
    Scalar s(v);  // no cast here: UBSan's float-cast-overflow checks that
    EXPECT_TRUE(s.is_floating());
    EXPECT_TRUE(std::isnan(v) ? std::isnan(s.to_double()) : s.to_double() == v);
    expect_error([&] { (void)s.to_int(); }, ErrorKind::Value, {"cannot be converted to int64"});
  }
  EXPECT_EQ(Scalar(2.9).to_int(), 2);
  EXPECT_EQ(Scalar(-2.9).to_int(), -2);
  EXPECT_EQ(Scalar(-0x1p63).to_int(), INT64_MIN);
  EXPECT_EQ(Scalar(int64_t{INT64_MAX}).to_int(), INT64_MAX);
}

TEST(ScalarConversion, FullOfNaNOrOutOfRangeIntoInt64IsANamedError) {
  for (double v : {kNaN, kInf, -kInf, 0x1p63, -0x1p64, 1e30})
    expect_error([&] { full({2}, v, DType::Int64); }, ErrorKind::Value,
                 {"[full]", "cannot be converted to int64 without overflow"});
  // in range: truncated toward zero, as PyTorch
  EXPECT_EQ(full({2}, 2.7, DType::Int64).to_vector<int64_t>(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(full({1}, -2.7, DType::Int64).item<int64_t>(), -2);
  EXPECT_EQ(full({1}, -0x1p63, DType::Int64).item<int64_t>(), INT64_MIN);
  EXPECT_EQ(full({1}, int64_t{INT64_MAX}, DType::Int64).item<int64_t>(), INT64_MAX);
  expect_error([&] { scalar_tensor(kNaN, DType::Int64); }, ErrorKind::Value,
               {"[scalar_tensor]", "int64"});
}

TEST(ScalarConversion, Float32RefusesFiniteOverflowButKeepsInfAndNaN) {
  expect_error([&] { full({1}, 1e300, DType::Float32); }, ErrorKind::Value,
               {"[full]", "cannot be converted to float32"});
  EXPECT_EQ(full({1}, kInf, DType::Float32).item<float>(), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(full({1}, kNaN, DType::Float32).item<float>()));
  EXPECT_EQ(full({1}, 1e300, DType::Float64).item<double>(), 1e300);
}

TEST(ScalarConversion, BoolTakesAnyValueNonzeroBeingTrue) {
  for (double v : {kNaN, kInf, 5.0, -0.5, 1e300})
    EXPECT_TRUE(full({1}, v, DType::Bool).item<bool>()) << v;
  EXPECT_FALSE(full({1}, 0.0, DType::Bool).item<bool>());
  EXPECT_TRUE(full({1}, 7, DType::Bool).item<bool>());
}

TEST(ScalarConversion, FillAndMaskedFillIntoIntegersRefuseNaN) {
  Tensor x = zeros({3}, DType::Int64);
  expect_error([&] { x.fill_(kNaN); }, ErrorKind::Value, {"[fill_]", "int64"});
  expect_error([&] { x.fill_(-kInf); }, ErrorKind::Value, {"[fill_]", "int64"});
  EXPECT_EQ(x.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));  // unchanged
  Tensor mask = tensor(std::vector<bool>{true, false, true});
  expect_error([&] { masked_fill(x, mask, kNaN); }, ErrorKind::Value, {"[masked_fill]", "int64"});
  expect_error([&] { masked_fill(x, mask, 1e19); }, ErrorKind::Value, {"[masked_fill]", "int64"});
  EXPECT_EQ(masked_fill(x, mask, 4).to_vector<int64_t>(), (std::vector<int64_t>{4, 0, 4}));
  // into floats the infinities are ordinary values
  Tensor y = masked_fill(zeros({3}), mask, -kInf);
  EXPECT_EQ(y.to_vector<float>()[0], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(y.to_vector<float>()[1], 0.0f);
}

TEST(ScalarConversion, InfiniteAndNaNScalarsFlowThroughOpsWithoutACast) {
  // Each of these made a Scalar from inf or NaN, which cast it to int64 (undefined).
  Tensor x = tensor({1.0, -2.0});
  x.div_(0);
  EXPECT_EQ(x.to_vector<float>()[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(x.to_vector<float>()[1], -std::numeric_limits<float>::infinity());
  EXPECT_NEAR(logsumexp(tensor({-kInf, 0.0, 1.0}), {0}).item<double>(), std::log(1 + M_E), 1e-6);
  Tensor e = zeros({0}, TensorOptions(DType::Float64).requires_grad(true));
  mean(e).backward();  // the gradient of a mean of nothing divides by 0
  EXPECT_EQ(e.grad().numel(), 0);
  Tensor v = zeros({1, 0}, TensorOptions(DType::Float64).requires_grad(true));
  var(v, {1}).sum().backward();
  EXPECT_EQ(v.grad().numel(), 0);
  EXPECT_TRUE(std::isnan((tensor({1.0}) * kNaN).item<float>()));
  EXPECT_TRUE(
      std::isnan(where(tensor(std::vector<bool>{false}), tensor({1.0}), kNaN).item<float>()));
}

TEST(ScalarConversion, WhereWithANumberConvertsItAsATensorWould) {
  // PyTorch wraps the number in a tensor: a float32 result holds inf, not an overflow error.
  Tensor c = tensor(std::vector<bool>{true, false});
  Tensor r = where(c, tensor({1.0, 2.0}), 1e300);
  EXPECT_EQ(r.dtype(), DType::Float32);
  EXPECT_EQ(r.to_vector<float>()[1], std::numeric_limits<float>::infinity());
}

TEST(ScalarConversion, CastsAndItemOfNaNToInt64AreDefined) {
  // NaN, inf and values beyond 2^63 read as INT64_MIN (what x86 gives PyTorch), by a rule
  // instead of an undefined cast.
  Tensor x = tensor({kNaN, kInf, -kInf, 1e300, -3.5, 7.9}, DType::Float64);
  EXPECT_EQ(x.to(DType::Int64).to_vector<int64_t>(),
            (std::vector<int64_t>{INT64_MIN, INT64_MIN, INT64_MIN, INT64_MIN, -3, 7}));
  EXPECT_EQ(tensor({kNaN}).item<int64_t>(), INT64_MIN);
  EXPECT_EQ(tensor({kNaN}).to_vector<int64_t>()[0], INT64_MIN);
  EXPECT_EQ(tensor(std::vector<double>{2.5, kNaN}, std::nullopt, DType::Int64).to_vector<int64_t>(),
            (std::vector<int64_t>{2, INT64_MIN}));
}

TEST(ScalarConversion, ArangeTooLargeSaysSoInsteadOfNegativeDimension) {
  expect_error([] { arange(0.0, 1e30); }, ErrorKind::Value, {"[arange]", "too large"});
  expect_error([] { arange(-1e308, 1e308, 1.0); }, ErrorKind::Value, {"[arange]", "too large"});
  expect_error([] { arange(0.0, 1.0, kNaN); }, ErrorKind::Value, {"[arange]", "step"});
  expect_error([] { arange(0.0, 1.0, kInf); }, ErrorKind::Value, {"[arange]", "step"});
  expect_error([] { arange(1e19, 1e19 + 1e4, 1024.0, DType::Int64); }, ErrorKind::Value,
               {"[arange]", "int64"});
  EXPECT_EQ(arange(0.0, 5.0, 2.0, DType::Int64).to_vector<int64_t>(),
            (std::vector<int64_t>{0, 2, 4}));
}

TEST(ScalarConversion, ClampOfIntegersByANonIntegralBoundComputesInFloat) {
  // PyTorch promotes an integer tensor clamped by a float bound; -inf would be an undefined cast
  Tensor x = tensor(std::vector<int64_t>{-5, 0, 5});
  Tensor lo_inf = clamp(x, -kInf, 2.0);
  EXPECT_TRUE(is_floating(lo_inf.dtype()));
  EXPECT_EQ(lo_inf.to_vector<double>(), (std::vector<double>{-5, 0, 2}));
  EXPECT_EQ(clamp(x, 0.5, std::nullopt).to_vector<double>(), (std::vector<double>{0.5, 0.5, 5}));
  Tensor same = clamp(x, -1.0, 1.0);
  EXPECT_EQ(same.dtype(), DType::Int64);
  EXPECT_EQ(same.to_vector<int64_t>(), (std::vector<int64_t>{-1, 0, 1}));
  // clamp_ keeps the tensor's dtype, so such a bound cannot be applied (PyTorch: the float
  // result cannot be cast to int64)
  expect_error([&] { x.clone().clamp_(-kInf, 1.0); }, ErrorKind::DType,
               {"[clamp_]", "not an integer", "(int64)"});
}
