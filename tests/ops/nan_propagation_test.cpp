// NaN through every kernel built on max, min or a comparison, checked against PyTorch's rules:
// relu, clamp, maximum/minimum, the extremum reductions and arg-reductions, softmax and
// log-softmax, logsumexp, masked softmax, cross-entropy and the inf-norm propagate a NaN
// input (SIMD max/min instructions and std::max do not). NaN sits first, in the middle and
// last, inside SIMD-width chunks and in their tails. The oracle is a scalar loop over the input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "ops/backward_ops.h"

using namespace adjoint;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Lengths around the SIMD widths (4, 8 and 16 lanes) and their tails.
const std::vector<int64_t> kLengths = {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 67};
const std::vector<DType> kFloats = {DType::Float32, DType::Float64};

std::string name(DType dt, int64_t n, int64_t at) {
  return std::string(to_string(dt)) + " n=" + std::to_string(n) + " nan at " + std::to_string(at);
}

// Values i - n/2 (both signs, some zero) with NaN at `at`.
std::vector<double> with_nan(int64_t n, int64_t at) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i) - static_cast<double>(n) / 2;
  v[at] = kNaN;
  return v;
}

// Positions to try: first, middle, last.
std::vector<int64_t> positions(int64_t n) { return {0, n / 2, n - 1}; }

bool same(double got, double want) { return std::isnan(want) ? std::isnan(got) : got == want; }

void expect_same(const Tensor& t, const std::vector<double>& want, const std::string& what) {
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(same(got[i], want[i]))
        << what << " at " << i << ": got " << got[i] << ", want " << want[i];
}

}  // namespace

TEST(NaNPropagation, ReluKeepsNaNAtEveryPositionAndWidth) {
  for (DType dt : kFloats)
    for (int64_t n : kLengths)
      for (int64_t at : positions(n)) {
        const std::vector<double> v = with_nan(n, at);
        std::vector<double> want(n);
        for (int64_t i = 0; i < n; ++i) want[i] = std::isnan(v[i]) ? kNaN : std::max(v[i], 0.0);
        Tensor x = tensor(v, std::nullopt, dt);
        expect_same(relu(x), want, "relu " + name(dt, n, at));
        // strided: every other element of a [2n] tensor
        Tensor wide = zeros({n, 2}, dt);
        Tensor column = select(wide, 1, 0);
        column.copy_(x);
        expect_same(relu(select(wide, 1, 0)), want, "strided relu " + name(dt, n, at));
      }
}

TEST(NaNPropagation, ReluGradientAtNaNIsPyTorchsThresholdBackward) {
  // PyTorch: relu's gradient is threshold_backward(gy, y, 0) = y <= 0 ? 0 : gy, so a NaN
  // output passes gy through; negative and zero inputs get 0, positive ones gy.
  for (DType dt : kFloats) {
    Tensor x = tensor({kNaN, -1.0, 0.0, 2.0}, dt).requires_grad_(true);
    Tensor y = relu(x);
    expect_same(y, {kNaN, 0, 0, 2}, std::string("relu forward ") + std::string(to_string(dt)));
    y.backward(tensor({3.0, 3.0, 3.0, 3.0}, dt));
    expect_same(x.grad(), {3, 0, 0, 3}, std::string("relu grad ") + std::string(to_string(dt)));
    expect_same(relu_backward(tensor({5.0, 5.0}, dt), tensor({kNaN, -kNaN}, dt)), {5, 5},
                "relu_backward at NaN");
  }
}

TEST(NaNPropagation, ClampAndHardtanhKeepNaN) {
  for (DType dt : kFloats)
    for (int64_t n : kLengths)
      for (int64_t at : positions(n)) {
        const std::vector<double> v = with_nan(n, at);
        std::vector<double> want(n);
        for (int64_t i = 0; i < n; ++i)
          want[i] = std::isnan(v[i]) ? kNaN : std::min(std::max(v[i], -1.0), 1.0);
        Tensor x = tensor(v, std::nullopt, dt);
        expect_same(clamp(x, -1.0, 1.0), want, "clamp " + name(dt, n, at));
        expect_same(clamp(x, -1.0, std::nullopt).clamp(std::nullopt, 1.0), want,
                    "clamp_min then clamp_max " + name(dt, n, at));
        Tensor y = x.clone();
        y.clamp_(-1.0, 1.0);
        expect_same(y, want, "clamp_ " + name(dt, n, at));
      }
}

TEST(NaNPropagation, MaximumAndMinimumPropagateFromEitherSide) {
  for (DType dt : kFloats) {
    Tensor a = tensor({kNaN, 1.0, kNaN, 2.0}, dt);
    Tensor b = tensor({1.0, kNaN, kNaN, 3.0}, dt);
    expect_same(maximum(a, b), {kNaN, kNaN, kNaN, 3}, "maximum");
    expect_same(minimum(a, b), {kNaN, kNaN, kNaN, 2}, "minimum");
    expect_same(maximum(b, a), {kNaN, kNaN, kNaN, 3}, "maximum swapped");
    // broadcast: one NaN scalar against a row
    expect_same(maximum(tensor({1.0, 2.0, 3.0}, dt), tensor({kNaN}, dt)), {kNaN, kNaN, kNaN},
                "maximum broadcast");
  }
}

TEST(NaNPropagation, MaximumGradientAtNaNGoesToBothInputsAsPyTorch) {
  // PyTorch: d maximum / da = where(a == b, g / 2, g).masked_fill_(a < b, 0), and the same for
  // b with a > b: a NaN on either side makes neither input lose, so both get g.
  Tensor a = tensor({kNaN, 1.0, 2.0, 5.0}, DType::Float64).requires_grad_(true);
  Tensor b = tensor({1.0, kNaN, 2.0, 3.0}, DType::Float64).requires_grad_(true);
  maximum(a, b).sum().backward();
  expect_same(a.grad(), {1, 1, 0.5, 1}, "maximum da");
  expect_same(b.grad(), {1, 1, 0.5, 0}, "maximum db");
  Tensor c = tensor({kNaN, 1.0, 2.0, 5.0}, DType::Float64).requires_grad_(true);
  Tensor d = tensor({1.0, kNaN, 2.0, 3.0}, DType::Float64).requires_grad_(true);
  minimum(c, d).sum().backward();
  expect_same(c.grad(), {1, 1, 0.5, 0}, "minimum dc");
  expect_same(d.grad(), {1, 1, 0.5, 1}, "minimum dd");
}

TEST(NaNPropagation, ExtremumTangentsAreTheTransposeOfTheGradientsAtNaN) {
  // Forward mode uses the reverse mode's weights (found by fuzz_ops: <c, J t> != <J^T c, t>
  // when the JVP took only b's tangent at a NaN): tangent = w_a t_a + w_b t_b, with the
  // weights the backward test above spells out.
  const std::vector<double> av{kNaN, 1.0, 2.0, 5.0}, bv{1.0, kNaN, 2.0, 3.0};
  const std::vector<double> ta{10, 20, 30, 40}, tb{1, 2, 3, 4};
  auto tangent = [&](bool max_op) {
    Tensor a = tensor(av, std::nullopt, DType::Float64),
           b = tensor(bv, std::nullopt, DType::Float64);
    auto f = [max_op](const std::vector<Tensor>& x) {
      return max_op ? maximum(x[0], x[1]) : minimum(x[0], x[1]);
    };
    return jvp(f, {a, b},
               {tensor(ta, std::nullopt, DType::Float64), tensor(tb, std::nullopt, DType::Float64)})
        .tangents;
  };
  // maximum: weights of a {1, 1, 0.5, 1}, of b {1, 1, 0.5, 0}
  expect_same(tangent(true), {11, 22, 16.5, 40}, "maximum tangent");
  // minimum: weights of a {1, 1, 0.5, 0}, of b {1, 1, 0.5, 1}
  expect_same(tangent(false), {11, 22, 16.5, 4}, "minimum tangent");
}

TEST(NaNPropagation, ExtremumReductionsAreNaNWhereverTheNaNIs) {
  for (DType dt : kFloats)
    for (int64_t n : kLengths)
      for (int64_t at : positions(n)) {
        Tensor x = tensor(with_nan(n, at), std::nullopt, dt);
        const std::string what = name(dt, n, at);
        EXPECT_TRUE(std::isnan(max(x).item<double>())) << "max " << what;
        EXPECT_TRUE(std::isnan(min(x).item<double>())) << "min " << what;
        EXPECT_TRUE(std::isnan(amax(x, {0}).item<double>())) << "amax " << what;
        EXPECT_TRUE(std::isnan(amin(x, {0}).item<double>())) << "amin " << what;
        // NaN counts as the largest and the smallest (PyTorch): its index is returned
        EXPECT_EQ(argmax(x).item<int64_t>(), at) << "argmax " << what;
        EXPECT_EQ(argmin(x).item<int64_t>(), at) << "argmin " << what;
        auto [value, index] = x.max(0);
        EXPECT_TRUE(std::isnan(value.item<double>())) << "max(dim) " << what;
        EXPECT_EQ(index.item<int64_t>(), at) << "max(dim) index " << what;
      }
}

TEST(NaNPropagation, ColumnReductionsKeepNaNInTheirColumnOnly) {
  // amax over dim 0 of a contiguous [rows, cols] (the blocked leading-rows kernel) and over
  // dim 1 of its transpose (strided), with a NaN in one column.
  for (DType dt : kFloats)
    for (int64_t cols : {3, 32, 33, 70}) {
      const int64_t rows = 5;
      std::vector<double> v(rows * cols);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i % 7);
      const int64_t nan_col = cols - 1;
      v[2 * cols + nan_col] = kNaN;
      Tensor x = tensor(v, Shape{rows, cols}, dt);
      for (const Tensor& r : {amax(x, {0}), amax(x.t(), {1}), amin(x, {0}), x.max(0).first}) {
        std::vector<double> got = r.to_vector<double>();
        for (int64_t c = 0; c < cols; ++c)
          EXPECT_EQ(std::isnan(got[c]), c == nan_col) << "column " << c << " of " << cols;
      }
    }
}

TEST(NaNPropagation, MaxOfAllGradientSplitsAmongTheNaNsAsPyTorch) {
  // PyTorch's evenly_distribute_backward: when max() is NaN the gradient is split among the
  // NaN elements; amax's (scale_grad_by_count) is NaN.
  Tensor x = tensor({1.0, kNaN, 3.0, kNaN}, DType::Float64).requires_grad_(true);
  max(x).backward();
  expect_same(x.grad(), {0, 0.5, 0, 0.5}, "max() grad");
  Tensor y = tensor({1.0, kNaN, 3.0}, DType::Float64).requires_grad_(true);
  amax(y, {0}).backward();
  for (double g : y.grad().to_vector<double>()) EXPECT_TRUE(std::isnan(g));
}

TEST(NaNPropagation, SoftmaxAndLogSoftmaxRowsWithNaNAreNaNOthersUntouched) {
  for (DType dt : kFloats)
    for (int64_t n : kLengths)
      for (int64_t at : positions(n)) {
        std::vector<double> v = with_nan(n, at);
        std::vector<double> clean(n);
        for (int64_t i = 0; i < n; ++i) clean[i] = static_cast<double>(i % 5);
        v.insert(v.end(), clean.begin(), clean.end());  // row 0 has the NaN, row 1 does not
        Tensor x = tensor(v, Shape{2, n}, dt);
        const std::string what = name(dt, n, at);
        for (bool log : {false, true}) {
          // along the last dim (SIMD row kernel) and along dim 0 of the transpose (middle-dim
          // kernel after a copy)
          for (int pass = 0; pass < 2; ++pass) {
            Tensor r = pass == 0 ? (log ? log_softmax(x, 1) : softmax(x, 1))
                                 : (log ? log_softmax(x.t(), 0) : softmax(x.t(), 0)).t();
            std::vector<double> got = r.to_vector<double>();
            double total = 0;
            for (int64_t j = 0; j < n; ++j) {
              EXPECT_TRUE(std::isnan(got[j])) << what << " log=" << log << " pass " << pass;
              EXPECT_FALSE(std::isnan(got[n + j])) << what << " log=" << log << " pass " << pass;
              total += log ? std::exp(got[n + j]) : got[n + j];
            }
            EXPECT_NEAR(total, 1.0, 1e-5) << what;
          }
        }
      }
}

TEST(NaNPropagation, LogsumexpIsNaNForNaNAndExactForInfinities) {
  for (DType dt : kFloats)
    for (int64_t n : kLengths)
      for (int64_t at : positions(n)) {
        Tensor x = tensor(with_nan(n, at), std::nullopt, dt);
        EXPECT_TRUE(std::isnan(logsumexp(x, {0}).item<double>())) << name(dt, n, at);
      }
  EXPECT_EQ(logsumexp(tensor({-kInf, -kInf}), {0}).item<double>(), -kInf);
  EXPECT_EQ(logsumexp(tensor({1.0, kInf}), {0}).item<double>(), kInf);
  EXPECT_NEAR(logsumexp(tensor({-kInf, 0.0}), {0}).item<double>(), 0.0, 1e-7);
}

TEST(NaNPropagation, MaskedSoftmaxRowIsNaNOnlyForAnUnmaskedNaN) {
  for (int64_t n : {4, 9, 17}) {
    std::vector<double> v(2 * n, 0.5);
    v[1] = kNaN;      // row 0: unmasked NaN
    v[n + 1] = kNaN;  // row 1: masked NaN
    std::vector<bool> m(2 * n, false);
    m[n + 1] = true;
    m[n + 3] = true;  // a non-prefix mask row
    Tensor y = masked_softmax(tensor(v, Shape{2, n}), tensor(m, Shape{2, n}), 1);
    std::vector<double> got = y.to_vector<double>();
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_TRUE(std::isnan(got[j])) << "n=" << n << " j=" << j;
      EXPECT_FALSE(std::isnan(got[n + j])) << "n=" << n << " j=" << j;
    }
  }
}

TEST(NaNPropagation, CrossEntropyRowWithNaNLogitIsNaN) {
  for (DType dt : kFloats)
    for (int64_t classes : {3, 8, 17}) {
      std::vector<double> v(2 * classes, 0.25);
      v[classes - 1] = kNaN;  // row 0, last class, not the target
      Tensor logits = tensor(v, Shape{2, classes}, dt).requires_grad_(true);
      Tensor target = tensor(std::vector<int64_t>{0, 1}, std::nullopt, DType::Int64);
      Tensor loss = cross_entropy(logits, target, Reduction::None);
      std::vector<double> l = loss.to_vector<double>();
      EXPECT_TRUE(std::isnan(l[0])) << classes;
      EXPECT_NEAR(l[1], std::log(static_cast<double>(classes)), 1e-5) << classes;
      loss.sum().backward();
      std::vector<double> g = logits.grad().to_vector<double>();
      for (int64_t j = 0; j < classes; ++j) {
        EXPECT_TRUE(std::isnan(g[j])) << classes;
        EXPECT_FALSE(std::isnan(g[classes + j])) << classes;
      }
    }
}

TEST(NaNPropagation, InfinityNormsAndSmoothActivationsKeepNaN) {
  for (DType dt : kFloats)
    for (int64_t n : kLengths)
      for (int64_t at : positions(n)) {
        Tensor x = tensor(with_nan(n, at), std::nullopt, dt);
        const std::string what = name(dt, n, at);
        EXPECT_TRUE(std::isnan(norm(x, kInf).item<double>())) << "inf-norm " << what;
        EXPECT_TRUE(std::isnan(norm(x, -kInf).item<double>())) << "-inf-norm " << what;
        for (const Tensor& y : {gelu(x), gelu(x, GeluApproximation::Tanh), leaky_relu(x),
                                sigmoid(x), silu(x), softplus(x), x.tanh(), x.abs()}) {
          std::vector<double> got = y.to_vector<double>();
          for (int64_t i = 0; i < n; ++i) EXPECT_EQ(std::isnan(got[i]), i == at) << what;
        }
      }
}
