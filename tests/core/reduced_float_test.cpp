// float16 and bfloat16 tensors: the dtype table and promotion (against PyTorch's
// promote_types results), conversions through to(), factories, printing, arithmetic computed
// in float32 and rounded once (the oracle: the same op in float32 on the rounded inputs, then
// one rounding by the scalar conversion of adjoint/half.h, whose own tests are exhaustive), and
// nn::Module::to.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>
#include <sstream>

#include "adjoint/adjoint.h"
#include "adjoint/linalg.h"
#include "adjoint/nn.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {

constexpr DType kF16 = DType::Float16, kBF16 = DType::BFloat16;

// The 16-bit patterns of a float16/bfloat16 tensor, row-major.
std::vector<uint16_t> bits_of(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<uint16_t> out(static_cast<std::size_t>(c.numel()));
  for (int64_t i = 0; i < c.numel(); ++i)
    out[i] = c.dtype() == kF16 ? c.data_ptr<Half>()[i].bits : c.data_ptr<BFloat16>()[i].bits;
  return out;
}

// float32 values rounded to `dtype` one by one with the scalar conversion.
std::vector<uint16_t> rounded_bits(const std::vector<float>& v, DType dtype) {
  std::vector<uint16_t> out;
  for (float x : v) out.push_back(dtype == kF16 ? Half(x).bits : BFloat16(x).bits);
  return out;
}

TEST(ReducedFloat, TableRowsAndPromotionMatchPyTorch) {
  EXPECT_EQ(itemsize(kF16), 2u);
  EXPECT_EQ(itemsize(kBF16), 2u);
  EXPECT_EQ(to_string(kF16), "float16");
  EXPECT_EQ(to_string(kBF16), "bfloat16");
  EXPECT_TRUE(is_floating(kF16) && is_reduced_float(kBF16) && !is_reduced_float(DType::Float32));
  EXPECT_EQ(opmath_dtype(kBF16), DType::Float32);
  // torch.promote_types over these pairs (PyTorch 1.13).
  struct Case {
    DType a, b, want;
  };
  const Case cases[] = {
      {kF16, kBF16, DType::Float32},
      {kBF16, DType::Float32, DType::Float32},
      {kF16, DType::Float64, DType::Float64},
      {kBF16, DType::Int64, kBF16},
      {DType::Bool, kF16, kF16},
      {kF16, kF16, kF16},
      {DType::Int64, kF16, kF16},
      {kBF16, DType::Bool, kBF16},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(promote_types(c.a, c.b), c.want) << c.a << " " << c.b;
    EXPECT_EQ(promote_types(c.b, c.a), c.want) << c.b << " " << c.a;
  }
  // torch.result_type: a number or a 0-d tensor of the same category does not widen a bfloat16
  // tensor; a float32 0-d tensor does not either; float16 with bfloat16 tensors gives float32.
  Tensor b = ones({2}, kBF16), h = ones({2}, kF16);
  EXPECT_EQ((b + 1.5).dtype(), kBF16);
  EXPECT_EQ((b * scalar_tensor(2.0, DType::Float64)).dtype(), kBF16);
  EXPECT_EQ((ones({2}, DType::Int64) + scalar_tensor(2.0, kBF16)).dtype(), kBF16);
  EXPECT_EQ((b + h).dtype(), DType::Float32);
  EXPECT_EQ((b + ones({2}, DType::Float32)).dtype(), DType::Float32);
}

TEST(ReducedFloat, EpsilonIsTheGapAboveOne) {
  for (DType d : {kF16, kBF16}) {
    const double eps = dtype_eps(d);
    EXPECT_EQ(full({}, 1.0 + eps, d).item<double>(), 1.0 + eps) << d;
    EXPECT_EQ(full({}, 1.0 + eps / 2, d).item<double>(), 1.0) << d;  // a tie, to even
  }
}

TEST(ReducedFloat, ToRoundsEachElementAsTheScalarConversion) {
  Generator gen(1);
  // Wide range, a non-contiguous source, and the specials.
  Tensor x = (randn({64, 33}, DType::Float32, &gen) * 1e4).t();
  for (DType d : {kF16, kBF16}) {
    Tensor y = x.to(d);
    EXPECT_EQ(y.dtype(), d);
    EXPECT_EQ(bits_of(y), rounded_bits(x.contiguous().to_vector<float>(), d)) << d;
    // Back to float32 is exact, and back again changes nothing.
    EXPECT_EQ(bits_of(y.to(DType::Float32).to(d)), bits_of(y));
    Tensor specials = tensor({INFINITY, -INFINITY, NAN, -0.0, 1e-40, 7e4}).to(d);
    std::vector<double> v = specials.to_vector<double>();
    EXPECT_EQ(v[0], INFINITY);
    EXPECT_EQ(v[1], -INFINITY);
    EXPECT_TRUE(std::isnan(v[2]));
    EXPECT_TRUE(v[3] == 0 && std::signbit(v[3]));
    EXPECT_EQ(v[4], d == kF16 ? 0.0 : static_cast<double>(static_cast<float>(BFloat16(1e-40f))));
    EXPECT_EQ(v[5], d == kF16 ? INFINITY : 70144.0);  // bfloat16: 7e4 to 8 significant bits
  }
  EXPECT_EQ(tensor({2.5, -3.75, 1e5}).to(kBF16).to(DType::Int64).to_vector<int64_t>(),
            (std::vector<int64_t>{2, -3, 99840}));
  EXPECT_EQ(full({2}, 3, DType::Int64).to(kF16).to_vector<double>(), (std::vector<double>{3, 3}));
  EXPECT_EQ(ones({1}, DType::Bool).to(kBF16).item<double>(), 1.0);
}

// Conversions of strided and broadcast views: per-head views whose rows are contiguous (the
// runs convert as vector blocks), transposes (element by element), row slices and expands, both
// ways, against the scalar conversion of each element.
TEST(ReducedFloat, StridedViewsConvertAsEachElement) {
  Generator gen(3);
  const Tensor base = randn({4, 6, 3, 40}, DType::Float32, &gen) * 300;
  const std::vector<std::function<Tensor(const Tensor&)>> views = {
      [](const Tensor& t) {
        return t.permute({0, 2, 1, 3});
      },  // [B, H, T, D] of [B, T, H, D]
      [](const Tensor& t) {
        return t.permute({0, 2, 3, 1});
      },                                                  // and transposed per head
      [](const Tensor& t) { return t.slice(3, 1, 38); },  // rows shorter than their stride
      [](const Tensor& t) {
        return t.slice(0, 0, 1).expand({5, 6, 3, 40});
      },  // a broadcast
  };
  for (DType d : {kF16, kBF16})
    for (const auto& view : views) {
      // float32 view -> 16 bits, each element rounded as the scalar conversion.
      const Tensor v = view(base);
      ASSERT_EQ(bits_of(v.to(d)), rounded_bits(v.contiguous().to_vector<float>(), d))
          << d << " " << v.shape();
      // The same view of a 16-bit tensor -> float32: exact, each element the scalar widening.
      const Tensor v16 = view(base.to(d));
      const std::vector<uint16_t> bits = bits_of(v16);
      const std::vector<float> widened = v16.to(DType::Float32).contiguous().to_vector<float>();
      ASSERT_EQ(widened.size(), bits.size());
      for (std::size_t i = 0; i < bits.size(); ++i) {
        const float want = d == kF16 ? detail::half_bits_to_float(bits[i])
                                     : detail::bfloat16_bits_to_float(bits[i]);
        ASSERT_EQ(std::bit_cast<uint32_t>(widened[i]), std::bit_cast<uint32_t>(want))
            << d << " " << v.shape() << " element " << i;
      }
    }
}

TEST(ReducedFloat, FactoriesFillInFloat32AndRoundOnce) {
  for (DType d : {kF16, kBF16}) {
    EXPECT_EQ(zeros({3}, d).to_vector<double>(), (std::vector<double>{0, 0, 0}));
    EXPECT_EQ(ones({2}, d).dtype(), d);
    EXPECT_EQ(full({1}, 0.1, d).item<double>(),
              static_cast<double>(d == kF16 ? static_cast<float>(Half(0.1f))
                                            : static_cast<float>(BFloat16(0.1f))));
    EXPECT_EQ(arange(0, 4, 1, d).to_vector<double>(), (std::vector<double>{0, 1, 2, 3}));
    EXPECT_EQ(linspace(0, 1, 5, d).to_vector<double>(),
              (std::vector<double>{0, 0.25, 0.5, 0.75, 1}));
    // The same draws as float32, rounded.
    Generator g1(5), g2(5);
    Tensor r = randn({100}, d, &g1), r32 = randn({100}, DType::Float32, &g2);
    EXPECT_EQ(bits_of(r), rounded_bits(r32.to_vector<float>(), d));
    Generator g3(6);
    Tensor u = rand({1000}, d, &g3).to(DType::Float32);
    EXPECT_TRUE(min(u).item<double>() >= 0 && max(u).item<double>() <= 1);
  }
  expect_error([] { (void)full({2}, 1e6, kF16); }, ErrorKind::Value, {"full", "float16"});
  EXPECT_EQ(full({1}, 1e38, kBF16).item<double>(), static_cast<float>(BFloat16(1e38f)));
}

TEST(ReducedFloat, PrintingNamesTheDtypeWithFourDigits) {
  std::ostringstream os;
  os << tensor({1.0, 0.333333}).to(kBF16);
  EXPECT_EQ(os.str(), "tensor([1, 0.334], shape=[2], dtype=bfloat16)");
}

// Elementwise ops, reductions, softmax and matmul: the float32 result on the same rounded
// inputs, rounded once. Pointwise and single-pass results are bitwise that; reductions and
// products may sum in another order, so they are compared within a few units of the dtype.
TEST(ReducedFloat, OpsComputeInFloat32AndRoundOnce) {
  Generator gen(2);
  for (DType d : {kF16, kBF16}) {
    Tensor a = randn({7, 9}, DType::Float32, &gen).to(d);
    Tensor b = randn({9}, DType::Float32, &gen).to(d);
    Tensor a32 = a.to(DType::Float32), b32 = b.to(DType::Float32);
    auto same = [&](const Tensor& got, const Tensor& want32, int line) {
      ASSERT_EQ(got.dtype(), d);
      EXPECT_EQ(bits_of(got), rounded_bits(want32.contiguous().to_vector<float>(), d))
          << d << " at line " << line;
    };
    // Each op rounds its own result: a composite's oracle rounds after each step.
    auto rounded = [&](const Tensor& t32) { return t32.to(d).to(DType::Float32); };
    same(a + b, a32 + b32, __LINE__);
    same(a * b - 1.5, rounded(a32 * b32) - 1.5, __LINE__);
    same(a / b, a32 / b32, __LINE__);
    same(exp(a), exp(a32), __LINE__);
    same(tanh(a).t(), tanh(a32).t(), __LINE__);
    same(gelu(a), gelu(a32), __LINE__);
    same(softmax(a, -1), softmax(a32, -1), __LINE__);
    same(where(gt(a, 0.0), a, b), where(gt(a32, 0.0), a32, b32), __LINE__);
    EXPECT_EQ(lt(a, b).to_vector<bool>(), lt(a32, b32).to_vector<bool>());
    same(sum(a, {1}), sum(a32, {1}), __LINE__);
    const double tol = 4 * dtype_eps(d);
    Tensor w = randn({9, 5}, DType::Float32, &gen).to(d);
    Tensor p = matmul(a, w);
    Tensor p32 = matmul(a32, w.to(DType::Float32));
    EXPECT_EQ(p.dtype(), d);
    const std::vector<float> got = p.to(DType::Float32).to_vector<float>(),
                             want = p32.to_vector<float>();
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << d << " element " << i;
  }
}

// Contiguous 16-bit operands run in float32 blocks (Note [Reduced-precision blocks] in
// elementwise.cpp): the lengths cross the 1024-element blocks and the per-thread chunks, and the
// oracle is the op in float32 on the same values, rounded once by the scalar conversion.
TEST(ReducedFloat, BlockedKernelsRoundTheFloat32ResultOnce) {
  Generator gen(5);
  for (DType d : {kF16, kBF16}) {
    for (int64_t n : {1, 7, 1023, 1025, 5000, 600001}) {
      Tensor a = randn({n}, DType::Float32, &gen).to(d);
      Tensor b = (rand({n}, DType::Float32, &gen) + 0.5).to(d);
      Tensor s = full({1}, 0.75, d);
      Tensor a32 = a.to(DType::Float32), b32 = b.to(DType::Float32), s32 = s.to(DType::Float32);
      auto same = [&](const Tensor& got, const Tensor& want32, int line) {
        ASSERT_EQ(got.dtype(), d);
        ASSERT_EQ(bits_of(got), rounded_bits(want32.to_vector<float>(), d))
            << d << " n=" << n << " at line " << line;
      };
      same(exp(a), exp(a32), __LINE__);
      same(tanh(a), tanh(a32), __LINE__);
      same(sigmoid(a), sigmoid(a32), __LINE__);
      same(gelu(a, GeluApproximation::Tanh), gelu(a32, GeluApproximation::Tanh), __LINE__);
      same(relu(a), relu(a32), __LINE__);
      same(-a, -a32, __LINE__);
      same(a * 1.5, a32 * 1.5, __LINE__);
      same(pow(a, 3), pow(a32, 3), __LINE__);
      same(sqrt(b), sqrt(b32), __LINE__);
      same(a + b, a32 + b32, __LINE__);
      same(a - b, a32 - b32, __LINE__);
      same(a * b, a32 * b32, __LINE__);
      same(a / b, a32 / b32, __LINE__);
      same(maximum(a, b), maximum(a32, b32), __LINE__);
      same(a * s, a32 * s32, __LINE__);  // a one-element operand
      // A backward kernel: gelu's gradient takes the upstream gradient and x, both 16-bit.
      Tensor x = a.detach().requires_grad_(true), x32 = a32.detach().requires_grad_(true);
      gelu(x, GeluApproximation::Tanh).backward(b);
      gelu(x32, GeluApproximation::Tanh).backward(b32);
      same(x.grad(), x32.grad(), __LINE__);
    }
  }
}

TEST(ReducedFloat, GradientsFlowInTheParameterDtype) {
  Generator gen(3);
  for (DType d : {kF16, kBF16}) {
    Tensor x = randn({4, 3}, DType::Float32, &gen).to(d).requires_grad_(true);
    Tensor loss = (x * x).sum();
    loss.backward();
    ASSERT_EQ(x.grad().dtype(), d);
    // d/dx sum(x^2) = 2x, exact in any binary format.
    EXPECT_EQ(bits_of(x.grad()), bits_of(x.detach() * 2));
    // Through a cast: the gradient comes back in the leaf's dtype.
    Tensor y = randn({3}, DType::Float32, &gen).requires_grad_(true);
    (y.to(d) * 3).sum().backward();
    EXPECT_EQ(y.grad().dtype(), DType::Float32);
    EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{3, 3, 3}));
  }
}

TEST(ReducedFloat, ModuleToConvertsParametersInPlace) {
  Generator gen(4);
  nn::Linear fc(6, 4, true, &gen);
  Tensor w = fc.weight;  // a handle taken before the conversion
  const std::vector<float> w32 = w.to_vector<float>();
  fc.to(kBF16);
  EXPECT_EQ(w.dtype(), kBF16);
  EXPECT_EQ(bits_of(w), rounded_bits(w32, kBF16));
  Tensor x = randn({2, 6}, DType::Float32, &gen).to(kBF16);
  Tensor y = fc.forward(x);
  EXPECT_EQ(y.dtype(), kBF16);
  y.sum().backward();
  EXPECT_EQ(fc.weight.grad().dtype(), kBF16);
  fc.to(DType::Float32);
  EXPECT_EQ(w.dtype(), DType::Float32);
  EXPECT_EQ(bits_of(w.to(kBF16)), rounded_bits(w32, kBF16));  // widened back exactly
  expect_error([&] { fc.to(DType::Int64); }, ErrorKind::DType, {"to()", "int64"});
}

TEST(ReducedFloat, LapackOpsRefuseSixteenBitInputsByName) {
  Tensor a = eye(3, std::nullopt, kBF16);
  expect_error([&] { (void)linalg::inv(a); }, ErrorKind::DType, {"inv", "[3, 3] (bfloat16)"});
}

}  // namespace
