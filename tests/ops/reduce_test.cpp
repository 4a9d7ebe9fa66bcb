// Unit tests for the reductions: var/std against the naive two-pass formula, prod and its
// gradient with and without zeros, logsumexp stability, norms, extrema with their indices and
// tie-splitting gradients, and arg-reductions. Oracles are loops over the input values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"

using namespace adjoint;

namespace {

Tensor f64(std::initializer_list<double> v, const Shape& s, bool grad = true) {
  Tensor t = tensor(v, s, DType::Float64);
  return grad ? t.requires_grad_(true) : t;
}

Tensor rnd(const Shape& s) {
  static Generator gen(7);
  return randn(s, DType::Float64, &gen).requires_grad_(true);
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                 double tol = 1e-10) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

template <class F>
void expect_error(F&& f, ErrorKind kind, const std::string& op) {
  try {
    f();
    ADD_FAILURE() << "expected an adjoint::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find("[" + op + "]"), std::string::npos) << e.what();
  }
}

// Naive variance of the values in `v` with the given correction.
double naive_var(const std::vector<double>& v, int64_t correction) {
  double m = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(static_cast<int64_t>(v.size()) - correction);
}

}  // namespace

TEST(Var, AllElementsAndAlongDimsMatchNaiveFormula) {
  Tensor x = rnd({3, 4});
  auto xv = x.to_vector<double>();
  EXPECT_NEAR(var(x).item<double>(), naive_var(xv, 1), 1e-12);
  EXPECT_NEAR(x.var({}, 0).item<double>(), naive_var(xv, 0), 1e-12);
  EXPECT_NEAR(x.std().item<double>(), std::sqrt(naive_var(xv, 1)), 1e-12);
  // along dim 1 (rows) and dim -2 (columns), keepdim both ways
  Tensor rows = var(x, {1});
  Tensor cols = adjoint::std(x, {-2}, 1, true);
  ASSERT_EQ(rows.shape(), Shape({3}));
  ASSERT_EQ(cols.shape(), Shape({1, 4}));
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(rows.to_vector<double>()[i],
                naive_var({xv[i * 4], xv[i * 4 + 1], xv[i * 4 + 2], xv[i * 4 + 3]}, 1), 1e-12);
  for (int j = 0; j < 4; ++j)
    EXPECT_NEAR(cols.to_vector<double>()[j], std::sqrt(naive_var({xv[j], xv[4 + j], xv[8 + j]}, 1)),
                1e-12);
}

TEST(Var, GradientMatchesClosedForm) {
  // d var / dx_i = 2 (x_i - mean) / (N - 1)
  Tensor x = f64({1.0, 2.0, 4.0, 7.0}, {4});
  var(x).backward();
  const double m = 3.5;
  expect_near(x.grad().to_vector<double>(),
              {2 * (1 - m) / 3, 2 * (2 - m) / 3, 2 * (4 - m) / 3, 2 * (7 - m) / 3});
}

TEST(Var, RejectsIntegers) {
  expect_error([] { var(arange(4)); }, ErrorKind::DType, "var");
}

TEST(Prod, ValuesAlongDims) {
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_DOUBLE_EQ(prod(x).item<double>(), 720.0);
  expect_near(x.prod({1}).to_vector<double>(), {6, 120});
  Tensor cols = x.prod({0}, true);
  EXPECT_EQ(cols.shape(), Shape({1, 3}));
  expect_near(cols.to_vector<double>(), {4, 10, 18});
  EXPECT_EQ(prod(arange(1, 5, 1, DType::Int64)).item<int64_t>(), 24);
}

TEST(Prod, GradientWithoutZerosIsProductOfOthers) {
  Tensor x = f64({2, 3, 5}, {3});
  prod(x).backward();
  expect_near(x.grad().to_vector<double>(), {15, 10, 6});
}

TEST(Prod, GradientWithOneZeroIsProductOfOthers) {
  // x = (2, 0, 5): d/dx_0 = 0 * 5 = 0, d/dx_1 = 2 * 5 = 10, d/dx_2 = 2 * 0 = 0
  Tensor x = f64({2, 0, 5}, {3});
  Tensor y = prod(x);
  EXPECT_EQ(y.item<double>(), 0.0);
  y.backward();
  expect_near(x.grad().to_vector<double>(), {0, 10, 0});
}

TEST(Prod, GradientWithZerosAlongADimPerSlice) {
  // rows: (0, 3, 4) one zero; (1, 2, 3) none; (0, 0, 7) two zeros
  Tensor x = f64({0, 3, 4, 1, 2, 3, 0, 0, 7}, {3, 3});
  Tensor w = f64({1, 2, 3}, {3}, false);
  (prod(x, {-1}) * w).sum().backward();
  expect_near(x.grad().to_vector<double>(), {12, 0, 0, 2 * 6, 2 * 3, 2 * 2, 0, 0, 0});
}

TEST(Prod, SecondDerivativeWithOneZero) {
  // f = x0 x1 x2 at (2, 0, 5): d2f/dx0 dx2 = x1 = 0, d2f/dx1 dx0 = x2 = 5, d2f/dx1 dx2 = x0 = 2.
  // grad of <df/dx, v> for v = (1, 1, 1) is (x1 + x2, x0 + x2, x0 + x1) = (5, 7, 2).
  Tensor x = f64({2, 0, 5}, {3});
  Tensor g = autograd::grad({prod(x)}, {x}, {}, std::nullopt, true)[0];
  Tensor h = autograd::grad({g.sum()}, {x})[0];
  expect_near(h.to_vector<double>(), {5, 7, 2});
}

TEST(Logsumexp, LargeValuesStayFinite) {
  Tensor x = f64({1000, 1000, 1000}, {3});
  Tensor y = logsumexp(x, {0});
  ASSERT_TRUE(std::isfinite(y.item<double>()));
  EXPECT_NEAR(y.item<double>(), 1000 + std::log(3.0), 1e-10);
  y.backward();
  expect_near(x.grad().to_vector<double>(), {1.0 / 3, 1.0 / 3, 1.0 / 3});  // softmax
  Tensor neg = tensor({-1000.0, -1000.0}, DType::Float32);
  EXPECT_NEAR(neg.logsumexp({0}).item<float>(), -1000 + std::log(2.0), 1e-3);
}

TEST(Logsumexp, AlongDimMatchesNaiveAndHandlesInfinities) {
  Tensor x = rnd({2, 3});
  auto xv = x.to_vector<double>();
  Tensor y = logsumexp(x, {1}, true);
  ASSERT_EQ(y.shape(), Shape({2, 1}));
  for (int i = 0; i < 2; ++i) {
    double s = 0;
    for (int j = 0; j < 3; ++j) s += std::exp(xv[i * 3 + j]);
    EXPECT_NEAR(y.to_vector<double>()[i], std::log(s), 1e-12);
  }
  const double inf = std::numeric_limits<double>::infinity();
  Tensor all_neg_inf = tensor({-inf, -inf}, DType::Float64);
  EXPECT_EQ(logsumexp(all_neg_inf, {0}).item<double>(), -inf);
  EXPECT_EQ(logsumexp(zeros({2, 0}, DType::Float64), {1}).to_vector<double>(),
            (std::vector<double>{-inf, -inf}));
}

TEST(Norm, TwoNormValueGradientAndZeroVector) {
  Tensor x = f64({3, -4}, {2});
  Tensor n = norm(x);
  EXPECT_DOUBLE_EQ(n.item<double>(), 5.0);
  n.backward();
  expect_near(x.grad().to_vector<double>(), {0.6, -0.8});  // x / ||x||
  Tensor z = f64({0, 0, 0}, {3});
  z.norm().backward();
  for (double g : z.grad().to_vector<double>()) EXPECT_EQ(g, 0.0);  // 0, not NaN
  Tensor big = tensor({3e30, 4e30}, DType::Float32);
  EXPECT_NEAR(big.norm().item<float>() / 5e30f, 1.0f, 1e-6f);
}

TEST(Norm, OtherOrdersAndDims) {
  Tensor x = f64({1, -2, 3, -4}, {2, 2});
  EXPECT_DOUBLE_EQ(norm(x, 1).item<double>(), 10.0);
  EXPECT_DOUBLE_EQ(norm(x, std::numeric_limits<double>::infinity()).item<double>(), 4.0);
  EXPECT_DOUBLE_EQ(norm(x, -std::numeric_limits<double>::infinity()).item<double>(), 1.0);
  EXPECT_DOUBLE_EQ(norm(x, 0).item<double>(), 4.0);
  EXPECT_NEAR(norm(x, 3).item<double>(), std::cbrt(1 + 8 + 27 + 64), 1e-12);
  expect_near(norm(x, 2, {1}).to_vector<double>(), {std::sqrt(5.0), 5.0});
  EXPECT_EQ(norm(x, 2, {0}, true).shape(), Shape({1, 2}));
  // d ||x||_3 / dx_i = sign(x_i) |x_i|^2 / ||x||_3^2
  norm(x, 3).backward();
  const double n3 = std::cbrt(100.0);
  expect_near(x.grad().to_vector<double>(),
              {1 / (n3 * n3), -4 / (n3 * n3), 9 / (n3 * n3), -16 / (n3 * n3)}, 1e-12);
}

TEST(MaxAlongDim, ValuesIndicesAndGradientOnTheArgmax) {
  Tensor x = f64({1, 5, 3, 9, 2, 4}, {2, 3});
  auto [v, i] = max(x, 1);
  expect_near(v.to_vector<double>(), {5, 9});
  EXPECT_EQ(i.dtype(), DType::Int64);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  (v * f64({10, 20}, {2}, false)).sum().backward();
  expect_near(x.grad().to_vector<double>(), {0, 10, 0, 20, 0, 0});

  Tensor y = f64({1, 5, 3, 9, 2, 4}, {2, 3});
  auto [mv, mi] = y.min(-2, true);
  EXPECT_EQ(mv.shape(), Shape({1, 3}));
  expect_near(mv.to_vector<double>(), {1, 2, 3});
  EXPECT_EQ(mi.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0}));
  mv.sum().backward();
  expect_near(y.grad().to_vector<double>(), {1, 0, 1, 0, 1, 0});
}

TEST(MaxAlongDim, TiesSendTheGradientToTheReturnedIndexOnly) {
  Tensor x = f64({2, 7, 7}, {3});
  auto [v, i] = x.max(0);
  EXPECT_EQ(i.item<int64_t>(), 1);  // the first maximum
  v.backward();
  expect_near(x.grad().to_vector<double>(), {0, 1, 0});
}

TEST(Amax, GradientIsSplitEvenlyAmongTies) {
  Tensor x = f64({1, 4, 4, 4, 0, 2}, {2, 3});
  Tensor a = amax(x, {1});
  expect_near(a.to_vector<double>(), {4, 4});
  a.sum().backward();
  expect_near(x.grad().to_vector<double>(), {0, 0.5, 0.5, 1, 0, 0});
  Tensor y = f64({3, 1, 1, 2}, {2, 2});
  y.amin({0, 1}, true).sum().backward();
  expect_near(y.grad().to_vector<double>(), {0, 0.5, 0.5, 0});
  Tensor z = f64({3, 8, 8, 8}, {4});
  Tensor m = z.max();
  EXPECT_EQ(m.dim(), 0);
  EXPECT_DOUBLE_EQ(m.item<double>(), 8.0);
  m.backward();
  expect_near(z.grad().to_vector<double>(), {0, 1.0 / 3, 1.0 / 3, 1.0 / 3});
  EXPECT_DOUBLE_EQ(min(z).item<double>(), 3.0);
}

TEST(Argmax, AlongDimsAndFlattened) {
  Tensor x = tensor({1.0, 5.0, 3.0, 9.0, 2.0, 4.0}, Shape{2, 3});
  EXPECT_EQ(argmax(x).item<int64_t>(), 3);
  EXPECT_EQ(argmin(x).item<int64_t>(), 0);
  EXPECT_EQ(x.argmax(1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(x.argmin(0).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(x.argmax(std::nullopt, true).shape(), Shape({1, 1}));
  EXPECT_EQ(x.argmax(-1, true).shape(), Shape({2, 1}));
  EXPECT_EQ(argmax(x.t(), 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 1}));
  EXPECT_FALSE(argmax(x.requires_grad_(true)).requires_grad());
}

TEST(Extrema, ErrorsNameTheOp) {
  expect_error([] { amax(zeros({2, 0}), {1}); }, ErrorKind::Shape, "amax");
  expect_error([] { max(zeros({0})); }, ErrorKind::Shape, "max");
  expect_error([] { min(zeros({3, 0}), 1); }, ErrorKind::Shape, "min");
  expect_error([] { argmax(zeros({0})); }, ErrorKind::Shape, "argmax");
  expect_error([] { max(zeros({2, 3}), 2); }, ErrorKind::Index, "max");
  expect_error([] { amax(zeros({2, 3}), {0, -2}); }, ErrorKind::Value, "amax");
}

TEST(SumMean, AlongDimsMatchNaiveLoop) {
  Tensor x = rnd({2, 3});
  auto xv = x.to_vector<double>();
  Tensor s = sum(x, {-1});
  Tensor m = mean(x, {0}, true);
  for (int i = 0; i < 2; ++i)
    EXPECT_NEAR(s.to_vector<double>()[i], xv[i * 3] + xv[i * 3 + 1] + xv[i * 3 + 2], 1e-12);
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(m.to_vector<double>()[j], (xv[j] + xv[3 + j]) / 2, 1e-12);
  (s.sum() + m.sum()).backward();
  for (double g : x.grad().to_vector<double>()) EXPECT_NEAR(g, 1.5, 1e-12);
}

TEST(SumMean, OverLeadingRowsOfWideMatricesMatchNaiveLoop) {
  // The column-blocked path (a bias gradient): full and partial blocks of columns, one row or
  // many, sum / max / prod, float32 accumulated in double; 1 and 2 threads give the same bits.
  Generator gen(3);
  const int saved_threads = get_num_threads();
  for (int64_t rows : {1, 3, 700}) {
    for (int64_t cols : {1, 31, 32, 33, 100, 300}) {
      const Tensor x = randn({rows, cols}, DType::Float32, &gen);
      const std::vector<float> xv = x.to_vector<float>();
      std::vector<double> want_sum(cols, 0.0), want_max(cols, -INFINITY), want_prod(cols, 1.0);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          const double v = xv[i * cols + j];
          want_sum[j] += v;
          want_max[j] = std::max(want_max[j], v);
          want_prod[j] *= 1 + v / 1000;  // stays near 1 over 700 rows
        }
      const std::string what = std::to_string(rows) + " x " + std::to_string(cols);
      std::vector<float> by_thread[2];
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        const Tensor s = sum(x, {0});
        by_thread[threads - 1] = s.to_vector<float>();
        SCOPED_TRACE(what + ", threads " + std::to_string(threads));
        expect_near(s.to_vector<double>(), want_sum, 1e-4);
        expect_near(amax(x, {0}).to_vector<double>(), want_max, 0);
        expect_near(prod(x / 1000 + 1, {0}).to_vector<double>(), want_prod, 1e-5);
      }
      EXPECT_EQ(by_thread[0], by_thread[1]) << what;
    }
  }
  set_num_threads(saved_threads);
}

// Sums over leading rows add each column per chunk of 256 rows, then the chunks in order: with
// no columns there is nothing to add (the ops fuzzer found a division by zero here), and with
// no rows the sums are 0.
TEST(SumMean, OverLeadingRowsWithNoColumnsOrNoRows) {
  for (DType dtype : {DType::Float32, DType::Float64}) {
    const Tensor no_columns = sum(zeros({600, 0}, dtype), {0});
    EXPECT_EQ(no_columns.shape(), Shape{0});
    const Tensor no_rows = sum(zeros({0, 700}, dtype), {0});
    ASSERT_EQ(no_rows.shape(), Shape{700});
    for (double v : no_rows.to_vector<double>()) EXPECT_EQ(v, 0.0);
  }
}

TEST(SumMean, ContiguousSumsAddChunksAndMatchAnExactSum) {
  // Full sums and sums over trailing dims add contiguous elements in chunks of 512, each as 16
  // interleaved double sums (Note [Floating sums in chunks]). Oracles: a long double sum of the
  // same values (within one double rounding per element), the documented order written as a
  // loop (bitwise, in float64 where the order shows), and 1 or 2 threads (bitwise).
  Generator gen(11);
  const int saved_threads = get_num_threads();
  auto in_order = [](const double* x, int64_t n) {  // the order of Note [Floating sums in chunks]
    double acc = 0;
    for (int64_t c = 0; c < n; c += 512) {
      double sums[16] = {};
      for (int64_t i = c; i < std::min(n, c + 512); ++i) sums[(i - c) % 16] += x[i];
      for (int width = 8; width >= 1; width /= 2)
        for (int k = 0; k < width; ++k) sums[k] += sums[k + width];
      acc += sums[0];
    }
    return acc;
  };
  for (DType dtype : {DType::Float32, DType::Float64}) {
    for (const Shape& shape : {Shape{100003}, Shape{7, 1500}, Shape{3, 2, 700}, Shape{5, 40},
                               Shape{50, 3}, Shape{9, 1}, Shape{4, 17}, Shape{3}}) {
      // values over many binades, so that the order of the adds shows in the last bits
      const Tensor x =
          (randn(shape, DType::Float64, &gen) * exp(randn(shape, DType::Float64, &gen) * 4.0))
              .to(dtype);
      const std::vector<double> xv = x.to_vector<double>();
      const int64_t row = shape.back() * (shape.size() == 3 ? shape[1] : 1);
      const std::vector<int64_t> dims =
          shape.size() == 3 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{-1};
      std::vector<double> by_thread[2];
      for (int threads : {1, 2}) {
        set_num_threads(threads);
        SCOPED_TRACE(std::string(to_string(dtype)) + " " + std::to_string(xv.size()) +
                     " elements, threads " + std::to_string(threads));
        const double full = x.sum().item<double>();
        const std::vector<double> rows = sum(x, dims).to_vector<double>();
        ASSERT_EQ(static_cast<int64_t>(rows.size() * row), static_cast<int64_t>(xv.size()));
        long double exact = 0, magnitude = 0;
        for (double v : xv) exact += v, magnitude += std::fabs(v);
        const double eps = dtype == DType::Float32 ? 6e-8 : 0;  // the float32 result's rounding
        EXPECT_LE(std::fabs(full - static_cast<double>(exact)),
                  1e-16L * magnitude * xv.size() + eps * std::fabs(full));
        if (dtype == DType::Float64) {
          EXPECT_EQ(full, in_order(xv.data(), static_cast<int64_t>(xv.size())));
          for (std::size_t r = 0; r < rows.size(); ++r)
            EXPECT_EQ(rows[r], in_order(xv.data() + r * row, row)) << "row " << r;
        }
        by_thread[threads - 1] = rows;
        by_thread[threads - 1].push_back(full);
      }
      EXPECT_EQ(by_thread[0], by_thread[1]);
    }
  }
  set_num_threads(saved_threads);
}

TEST(Reduce, MeanOf16BitValuesAccumulatesInFloat32) {
  // The sum of 100,000 float16 ones (100,000) is past float16's largest value (65,504), but
  // their mean is 1: the mean is taken in float32 and rounded once (as PyTorch), not the
  // float16 sum divided. Oracle: the float64 mean rounded once to the input's dtype.
  for (DType low : {DType::Float16, DType::BFloat16}) {
    const Tensor x = ones({100000}, low) * 0.75;
    EXPECT_EQ(x.mean().dtype(), low);
    EXPECT_EQ(x.mean().item<double>(), x.to(DType::Float64).mean().to(low).item<double>());
    const Tensor m = ones({2, 70000}, low).mean({1});
    EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{1.0f, 1.0f}));
  }
  // its gradient flows back in the input's dtype
  Tensor h = ones({70000}, DType::Float16).requires_grad_(true);
  h.mean().backward();
  EXPECT_EQ(h.grad().dtype(), DType::Float16);
  EXPECT_NEAR(h.grad().to(DType::Float64).sum().item<double>(), 1.0, 1e-2);
}
