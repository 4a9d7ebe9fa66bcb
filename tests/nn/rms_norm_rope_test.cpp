// Tests for rms_norm / nn::RMSNorm and rotary position embedding (adjoint/transformer_ops.h):
// values against plain std:: loops (RMSNorm row by row, RoPE position by position), RoPE's
// analytic properties (each rotation keeps the norm; q_m · k_n depends only on m - n), gradients
// against central finite differences in float64 (both are composites: no rule of their own to
// check otherwise), the 16-bit path against float32, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// y[i] = x[i] / sqrt(mean(x²) + eps) * w[i] over rows of length d.
std::vector<double> rms_norm_loop(const std::vector<double>& x, int64_t d,
                                  const std::vector<double>& w, double eps) {
  std::vector<double> y(x.size());
  for (std::size_t r = 0; r < x.size() / d; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < d; ++i) ms += x[r * d + i] * x[r * d + i];
    const double inv = 1 / std::sqrt(ms / d + eps);
    for (int64_t i = 0; i < d; ++i) y[r * d + i] = x[r * d + i] * inv * w[i];
  }
  return y;
}

// RoPE of x [rows, T, D] position by position: the pair (x[i], x[i + D/2]) at position
// offset + t turns by (offset + t) base^(-2i/D).
std::vector<double> rope_loop(const std::vector<double>& x, int64_t rows, int64_t T, int64_t D,
                              int64_t offset, double base) {
  std::vector<double> y(x.size());
  const int64_t half = D / 2;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < half; ++i) {
        const double theta = static_cast<double>(offset + t) * std::pow(base, -2.0 * i / D);
        const int64_t at = (r * T + t) * D;
        const double a = x[at + i], b = x[at + i + half];
        y[at + i] = a * std::cos(theta) - b * std::sin(theta);
        y[at + i + half] = b * std::cos(theta) + a * std::sin(theta);
      }
  return y;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i]))) << "at " << i;
}

}  // namespace

TEST(RmsNorm, MatchesRowLoop) {
  Generator gen(1);
  const Tensor x = randn({2, 3, 8}, DType::Float64, &gen);
  const Tensor w = randn({8}, DType::Float64, &gen);
  expect_near_all(values(rms_norm(x, w, 1e-5)), rms_norm_loop(values(x), 8, values(w), 1e-5),
                  1e-14);
  // Without a weight: weight 1. A transposed view reads its strides.
  const Tensor xt = randn({8, 5}, DType::Float64, &gen).t();
  expect_near_all(values(rms_norm(xt, {}, 0.5)),
                  rms_norm_loop(values(xt.contiguous()), 8, std::vector<double>(8, 1.0), 0.5),
                  1e-14);
}

TEST(RmsNorm, ModuleIsTheFunctionWithItsWeight) {
  Generator gen(2);
  nn::RMSNorm norm(6, 1e-4);
  ASSERT_EQ(norm.named_parameters().size(), 1u);
  EXPECT_EQ(norm.named_parameters()[0].first, "weight");
  EXPECT_EQ(values(norm.weight), std::vector<double>(6, 1.0));
  norm.to(DType::Float64);
  {
    NoGradGuard no_grad;
    norm.weight.copy_(randn({6}, DType::Float64, &gen));
  }
  const Tensor x = randn({4, 6}, DType::Float64, &gen);
  expect_near_all(values(norm(x)), rms_norm_loop(values(x), 6, values(norm.weight), 1e-4), 1e-14);
}

TEST(RmsNorm, GradientsMatchFiniteDifferences) {
  Generator gen(3);
  const Tensor x = randn({3, 5}, DType::Float64, &gen).requires_grad_(true);
  const Tensor w = randn({5}, DType::Float64, &gen).requires_grad_(true);
  auto f = [](const std::vector<Tensor>& in) { return rms_norm(in[0], in[1], 1e-3); };
  const GradcheckResult first = gradcheck(f, {x, w}, {.check_jvp = true});
  EXPECT_TRUE(first.ok) << first.message;
  const GradcheckResult second = gradgradcheck(f, {x, w});
  EXPECT_TRUE(second.ok) << second.message;
}

TEST(RmsNorm, ReducedPrecisionNormalisesInFloat32) {
  Generator gen(4);
  const Tensor x = randn({4, 64}, DType::Float32, &gen) * 30;
  const Tensor w = randn({64}, DType::Float32, &gen);
  const std::vector<double> want = values(rms_norm(x, w));
  for (DType low : {DType::BFloat16, DType::Float16}) {
    const Tensor y = rms_norm(to(x, low), to(w, low));
    EXPECT_EQ(y.dtype(), low);
    // Rounding x, the normalised x and the product: a few units of the 16-bit epsilon of |y|.
    const double ulp = low == DType::BFloat16 ? 0x1p-7 : 0x1p-10;
    const std::vector<double> got = values(y);
    for (std::size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 4 * ulp * std::max(1.0, std::abs(want[i]))) << i;
  }
}

TEST(RmsNorm, Errors) {
  expect_error(
      [] {
        rms_norm(ones({2, 3}), ones({4}));
      },
      ErrorKind::Shape, {"[rms_norm]", "[4]", "[2, 3]"});
  expect_error(
      [] {
        rms_norm(ones({2, 3}, DType::Int64));
      },
      ErrorKind::DType, {"[rms_norm]", "int64"});
  expect_error([] { rms_norm(ones({2, 3}), {}, -1); }, ErrorKind::Value, {"[rms_norm]", "eps"});
  nn::RMSNorm norm(4);
  expect_error([&] { norm(ones({2, 3})); }, ErrorKind::Shape, {"nn.RMSNorm", "[2, 3]"});
  expect_error([] { nn::RMSNorm(0); }, ErrorKind::Value, {"nn.RMSNorm"});
}

TEST(Rope, MatchesLoopOverPositions) {
  Generator gen(5);
  const int64_t B = 2, H = 3, T = 5, D = 8;
  const Tensor x = randn({B, H, T, D}, DType::Float64, &gen);
  for (int64_t offset : {int64_t{0}, int64_t{7}})
    for (double base : {10000.0, 500.0})
      expect_near_all(values(rotary_embedding(x, offset, base)),
                      rope_loop(values(x), B * H, T, D, offset, base), 1e-13);
}

TEST(Rope, OffsetContinuesTheSequence) {
  // Positions P .. P+T-1 of a longer sequence, rotated with offset P, are that sequence's rows.
  Generator gen(6);
  const Tensor x = randn({2, 9, 6}, DType::Float64, &gen);
  const std::vector<double> whole = values(rotary_embedding(x).narrow(1, 4, 5));
  expect_near_all(values(rotary_embedding(x.narrow(1, 4, 5), 4)), whole, 1e-14);
}

TEST(Rope, RotationKeepsTheNorm) {
  Generator gen(7);
  const Tensor x = randn({3, 11, 16}, DType::Float64, &gen);
  const Tensor y = rotary_embedding(x, 100);
  expect_near_all(values(norm(y, 2, {-1})), values(norm(x, 2, {-1})), 1e-13);
}

TEST(Rope, DotProductDependsOnlyOnRelativePosition) {
  Generator gen(8);
  const int64_t D = 12;
  const Tensor q = randn({1, D}, DType::Float64, &gen);
  const Tensor k = randn({1, D}, DType::Float64, &gen);
  auto score = [&](int64_t m, int64_t n) {
    return sum(rotary_embedding(q, m) * rotary_embedding(k, n)).item<double>();
  };
  for (int64_t shift : {int64_t{0}, int64_t{1}, int64_t{4}}) {
    const double at_origin = score(shift, 0);
    for (int64_t n : {int64_t{3}, int64_t{17}, int64_t{250}})
      EXPECT_NEAR(score(n + shift, n), at_origin, 1e-12) << "m - n = " << shift << ", n = " << n;
  }
  // and it does depend on m - n (the property is not vacuous)
  EXPECT_GT(std::abs(score(4, 0) - score(1, 0)), 1e-3);
}

TEST(Rope, GradientsMatchFiniteDifferences) {
  Generator gen(9);
  const Tensor x = randn({2, 3, 4}, DType::Float64, &gen).requires_grad_(true);
  auto f = [](const std::vector<Tensor>& in) { return rotary_embedding(in[0], 2); };
  const GradcheckResult r = gradcheck(f, {x}, {.check_jvp = true});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(Rope, TablesRoundOnceToTheirDtype) {
  const RotaryTables f64 = rotary_tables(6, 4, 10000, 3, DType::Float64);
  const RotaryTables f32 = rotary_tables(6, 4, 10000, 3, DType::Float32);
  EXPECT_EQ(f32.cos.dtype(), DType::Float32);
  EXPECT_EQ(values(f32.sin), values(to(f64.sin, DType::Float32)));
  // row t = angle (3 + t) base^(-2i/D): row 0, frequency 0 is angle 3
  EXPECT_NEAR(values(f64.cos)[0], std::cos(3.0), 1e-15);
  EXPECT_NEAR(values(f64.sin)[2], std::sin(3.0), 1e-15);  // i + D/2 shares frequency i
}

TEST(Rope, Errors) {
  expect_error([] { rotary_embedding(ones({2, 3})); }, ErrorKind::Value, {"rotary_tables", "even"});
  const RotaryTables t = rotary_tables(3, 4);
  expect_error(
      [&] {
        apply_rotary_embedding(ones({2, 5, 4}), t.cos, t.sin);
      },
      ErrorKind::Shape, {"[apply_rotary_embedding]", "[5, 4]", "[3, 4]"});
  expect_error(
      [&] {
        apply_rotary_embedding(ones({3, 4}, DType::Float64), t.cos, t.sin);
      },
      ErrorKind::DType, {"[apply_rotary_embedding]", "float64", "float32"});
  expect_error([] { rotary_tables(3, 4, 10000, -1); }, ErrorKind::Value, {"rotary_tables"});
  expect_error([] { rotary_embedding(ones({4})); }, ErrorKind::Shape, {"rotary_embedding", "[4]"});
}
