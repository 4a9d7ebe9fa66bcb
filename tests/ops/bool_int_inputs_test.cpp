// Unary and binary ops on bool and int64 inputs. Bool has no arithmetic: abs, relu, neg and
// clamp_ raise as in PyTorch 1.13 (they used to compute in int64 and write 8 bytes per 1-byte
// element, a heap-buffer-overflow), sign returns bool and square promotes to int64. Below the
// ops, every elementwise kernel checks its element type against each operand's dtype once
// (Note [Kernel element types]), so a kernel can no longer write past a buffer whatever
// dtype an op lets through. Integer results are checked against plain int64 arithmetic.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "adjoint/adjoint.h"
#include "backend/kernels.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {
Tensor bools() { return tensor(std::vector<bool>{true, false, true}); }
Tensor ints(std::vector<int64_t> v) { return tensor(v); }
std::vector<int64_t> iv(const Tensor& t) { return t.to_vector<int64_t>(); }
}  // namespace

TEST(BoolInputs, ArithmeticUnaryOpsRaiseNamingTheOp) {
  expect_error([] { abs(bools()); }, ErrorKind::DType, {"[abs]", "bool"});
  expect_error([] { relu(bools()); }, ErrorKind::DType, {"[relu]", "bool"});
  expect_error([] { neg(bools()); }, ErrorKind::DType, {"[neg]", "bool"});
  expect_error([] { clamp(bools(), 0.0, 1.0); }, ErrorKind::DType, {"[clamp]", "bool"});
}

TEST(BoolInputs, InPlaceClampOfBoolRaisesAndLeavesTheTensorAlone) {
  // Tensor::clamp_ refuses bool by name (the kernel entry would too, as [clamp]).
  Tensor x = bools();
  expect_error([&] { x.clamp_(0.0, 1.0); }, ErrorKind::DType, {"[clamp_]", "bool"});
  expect_error([&] { x.clamp_(std::nullopt, 0.0); }, ErrorKind::DType, {"[clamp_]", "bool"});
  expect_error([&] { kernels::unary_into(kernels::Unary::ClampMin, x, x, 0.0); }, ErrorKind::DType,
               {"[clamp]", "bool"});
  EXPECT_EQ(x.to_vector<bool>(), (std::vector<bool>{true, false, true}));
}

TEST(BoolInputs, SignKeepsBoolAndSquarePromotesToInt64AsPyTorch) {
  Tensor s = sign(bools());
  EXPECT_EQ(s.dtype(), DType::Bool);
  EXPECT_EQ(s.to_vector<bool>(), (std::vector<bool>{true, false, true}));
  Tensor q = square(bools());
  EXPECT_EQ(q.dtype(), DType::Int64);
  EXPECT_EQ(iv(q), (std::vector<int64_t>{1, 0, 1}));
  Tensor p = pow(bools(), 3);
  EXPECT_EQ(p.dtype(), DType::Int64);
  EXPECT_EQ(iv(p), (std::vector<int64_t>{1, 0, 1}));
}

TEST(BoolInputs, ComparisonsAndLogicalOpsStillWork) {
  EXPECT_EQ(eq(bools(), 1).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(logical_not(bools()).to_vector<bool>(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(gt(bools(), 0).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ((bools() * bools()).to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(iv(bools().sum({}, false)), (std::vector<int64_t>{2}));
}

TEST(KernelElementTypes, AnOutputOfTheWrongDtypeIsRefusedBeforeAnyWrite) {
  // Each kernel writes its compute type: int64 results into a bool buffer would overflow it.
  Tensor x = ints({-1, 2, -3});
  Tensor out = zeros({3}, DType::Bool);
  for (kernels::Unary k : {kernels::Unary::Neg, kernels::Unary::Abs, kernels::Unary::Square,
                           kernels::Unary::Relu, kernels::Unary::Sign})
    expect_error([&] { kernels::unary_into(k, out, x); }, ErrorKind::Internal,
                 {"kernel element type int64", "(bool)"});
  expect_error([&] { kernels::binary_into(kernels::Binary::Add, out, x, x); }, ErrorKind::Internal,
               {"kernel element type int64"});
  expect_error([&] { kernels::binary_into(kernels::Binary::Lt, zeros({3}, DType::Int64), x, x); },
               ErrorKind::Internal, {"kernel element type bool"});
  expect_error([&] { kernels::add_scaled_into(zeros({3}), zeros({3}, DType::Float64), 1.0); },
               ErrorKind::Internal, {});
  EXPECT_EQ(out.to_vector<bool>(), (std::vector<bool>{false, false, false}));
  // the right dtype passes
  Tensor good = zeros({3}, DType::Int64);
  kernels::unary_into(kernels::Unary::Abs, good, x);
  EXPECT_EQ(iv(good), (std::vector<int64_t>{1, 2, 3}));
}

TEST(IntInputs, UnaryOpsComputeInInt64) {
  Tensor x = ints({-3, 0, 4});
  EXPECT_EQ(iv(abs(x)), (std::vector<int64_t>{3, 0, 4}));
  EXPECT_EQ(iv(neg(x)), (std::vector<int64_t>{3, 0, -4}));
  EXPECT_EQ(iv(square(x)), (std::vector<int64_t>{9, 0, 16}));
  EXPECT_EQ(iv(relu(x)), (std::vector<int64_t>{0, 0, 4}));
  EXPECT_EQ(iv(sign(x)), (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(iv(clamp(x, -1.0, 2.0)), (std::vector<int64_t>{-1, 0, 2}));
  EXPECT_EQ(iv(x * 3), (std::vector<int64_t>{-9, 0, 12}));
  EXPECT_EQ(iv(x + 1), (std::vector<int64_t>{-2, 1, 5}));
  EXPECT_EQ(iv(5 - x), (std::vector<int64_t>{8, 5, 1}));
  for (DType dt : {abs(x).dtype(), relu(x).dtype(), square(x).dtype(), sign(x).dtype()})
    EXPECT_EQ(dt, DType::Int64);
}

TEST(IntInputs, IntegerPowIsExactAndWrapsLikePyTorch) {
  // int64 pow used std::pow in double and cast back: inexact above 2^53 and undefined beyond
  // 2^63. Now repeated squaring in int64 (wrapping as PyTorch's powi).
  Tensor base = ints({3, -2, 7, 1, -1, 2});
  EXPECT_EQ(iv(pow(base, 2)), (std::vector<int64_t>{9, 4, 49, 1, 1, 4}));
  EXPECT_EQ(iv(pow(ints({3}), 39)), (std::vector<int64_t>{4052555153018976267}));  // exact
  uint64_t wrapped = 1;
  for (int i = 0; i < 41; ++i) wrapped *= 3;
  EXPECT_EQ(iv(pow(ints({3}), 41))[0], static_cast<int64_t>(wrapped));
  Tensor e = ints({2, 3, 0, -5, -3, -1});
  EXPECT_EQ(iv(pow(base, e)), (std::vector<int64_t>{9, -8, 1, 1, -1, 0}));
  EXPECT_EQ(pow(base, e).dtype(), DType::Int64);
  expect_error([&] { pow(base, -1); }, ErrorKind::Value, {"[pow]", "negative"});
}

TEST(IntInputs, InPlaceAddWithAFractionalAlphaIsRefused) {
  Tensor x = ints({1, 2});
  expect_error(
      [&] {
        x.add_(ints({1, 1}), 2.5);
      },
      ErrorKind::DType, {"alpha must not be a floating point number"});
  EXPECT_EQ(iv(x), (std::vector<int64_t>{1, 2}));
  x.add_(ints({1, 1}), 3);
  EXPECT_EQ(iv(x), (std::vector<int64_t>{4, 5}));
}

TEST(IntInputs, Int64ArithmeticWrapsOnOverflowAsPyTorch) {
  // Signed overflow is undefined in C++ (UBSan stops on it); PyTorch's int64 tensors wrap.
  const int64_t max = INT64_MAX, min = INT64_MIN;
  EXPECT_EQ(iv(ints({max}) + ints({1})), (std::vector<int64_t>{min}));
  EXPECT_EQ(iv(ints({min}) - ints({1})), (std::vector<int64_t>{max}));
  EXPECT_EQ(iv(ints({max}) * ints({2})), (std::vector<int64_t>{-2}));
  EXPECT_EQ(iv(ints({max}) + 1), (std::vector<int64_t>{min}));
  EXPECT_EQ(iv(ints({max}) * 2), (std::vector<int64_t>{-2}));
  EXPECT_EQ(iv(ints({5}) - min), (std::vector<int64_t>{min + 5}));
  EXPECT_EQ(iv(neg(ints({min}))), (std::vector<int64_t>{min}));
  EXPECT_EQ(iv(abs(ints({min}))), (std::vector<int64_t>{min}));
  EXPECT_EQ(iv(square(ints({int64_t{1} << 32}))), (std::vector<int64_t>{0}));
  EXPECT_EQ(iv(ints({max, 1}).sum({}, false)), (std::vector<int64_t>{min}));
  EXPECT_EQ(iv(ints({max, 2}).prod({}, false)), (std::vector<int64_t>{-2}));
  Tensor acc = ints({max});
  acc.add_(ints({1}));
  EXPECT_EQ(iv(acc), (std::vector<int64_t>{min}));
}

TEST(IntInputs, IntegerMatmulWrapsLikeTheElementwiseOps) {
  // The int64 matmul loop overflowed as signed arithmetic (undefined; found by fuzz_ops with
  // INT64_MIN * INT64_MIN). Oracle: the same sums in uint64, which wrap by definition.
  const std::vector<int64_t> a = {INT64_MIN, 3, INT64_MAX, -7}, b = {INT64_MIN, 5, 2, INT64_MAX};
  Tensor c = matmul(ints(a).reshape({2, 2}), ints(b).reshape({2, 2}));
  std::vector<int64_t> want(4);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      uint64_t acc = 0;
      for (int p = 0; p < 2; ++p)
        acc += static_cast<uint64_t>(a[i * 2 + p]) * static_cast<uint64_t>(b[p * 2 + j]);
      want[i * 2 + j] = static_cast<int64_t>(acc);
    }
  EXPECT_EQ(iv(c), want);
}
