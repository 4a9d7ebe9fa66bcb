// cumsum, cumprod and linear_recurrence (src/ops/scan.cpp) against loops in double: every dim of
// a 3-d tensor, both directions of the recurrence, float32 (which accumulates in double),
// bfloat16 (rounded once), integers and bool (int64, wrapping as int64 arithmetic does), the
// same bits on one thread and two, lanes wider than a block of the kernel, and the errors.
// (Finite differences, double backward, vmap, compile, export and meta: samples_scan.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/threading.h"

namespace adjoint {
namespace {

std::vector<double> values(const Tensor& t) {
  return t.detach().contiguous().to(DType::Float64).to_vector<double>();
}

enum class Kind { Sum, Prod, Recurrence };

// The loop: x (and a) as float64 values of `shape`, scanned along dim in double.
std::vector<double> oracle(Kind kind, const std::vector<double>& a, const std::vector<double>& x,
                           const Shape& shape, int64_t dim, bool reverse) {
  int64_t outer = 1, n = shape[static_cast<std::size_t>(dim)], inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= shape[static_cast<std::size_t>(d)];
  for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d)
    inner *= shape[static_cast<std::size_t>(d)];
  std::vector<double> y(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j) {
      double acc = kind == Kind::Prod ? 1.0 : 0.0;
      for (int64_t s = 0; s < n; ++s) {
        const int64_t k = reverse ? n - 1 - s : s;
        const auto at = static_cast<std::size_t>((o * n + k) * inner + j);
        acc = kind == Kind::Sum    ? acc + x[at]
              : kind == Kind::Prod ? acc * x[at]
                                   : a[at] * acc + x[at];
        y[at] = acc;
      }
    }
  return y;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want, double rel) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::abs(got[i] - want[i]), rel * (1.0 + std::abs(want[i]))) << "at " << i;
}

TEST(Scan, EveryDimMatchesTheLoopInFloat64AndFloat32) {
  const Shape shape{3, 5, 4};
  for (DType dt : {DType::Float64, DType::Float32}) {
    Generator gen(3);
    const Tensor x = rand(shape, dt, &gen) + 0.5;  // products stay in range
    const Tensor a = rand(shape, dt, &gen) * 1.6 - 0.8;
    const std::vector<double> xv = values(x), av = values(a);
    // float32 results are the double scan rounded once.
    const double rel = dt == DType::Float64 ? 1e-14 : 1e-7;
    for (int64_t dim = 0; dim < 3; ++dim) {
      SCOPED_TRACE(std::string(to_string(dt)) + " dim " + std::to_string(dim));
      expect_near(values(cumsum(x, dim)), oracle(Kind::Sum, {}, xv, shape, dim, false), rel);
      expect_near(values(cumprod(x, dim - 3)), oracle(Kind::Prod, {}, xv, shape, dim, false), rel);
      for (bool reverse : {false, true})
        expect_near(values(linear_recurrence(a, x, dim, reverse)),
                    oracle(Kind::Recurrence, av, xv, shape, dim, reverse), rel);
    }
  }
}

TEST(Scan, Float32AccumulatesInDouble) {
  // 1 + 1e-8 repeated: a float32 running sum never moves past 1, the double one does.
  const int64_t n = 1000;
  std::vector<float> v(static_cast<std::size_t>(n), 1e-8f);
  v[0] = 1.0f;
  const std::vector<double> y = values(cumsum(tensor(v), 0));
  EXPECT_FLOAT_EQ(static_cast<float>(y.back()), static_cast<float>(1.0 + 999 * 1e-8));
  EXPECT_GT(y.back(), 1.0);
}

TEST(Scan, BFloat16RoundsTheFloat32ResultOnce) {
  Generator gen(5);
  const Tensor x = randn({4, 33}, DType::Float32, &gen).to(DType::BFloat16);
  const Tensor got = cumsum(x, 1);
  EXPECT_EQ(got.dtype(), DType::BFloat16);
  EXPECT_EQ(values(got), values(cumsum(x.to(DType::Float32), 1).to(DType::BFloat16)));
}

TEST(Scan, IntegersAndBoolScanInInt64) {
  const Tensor i = tensor(std::vector<int32_t>{3, -1, 4, 1, -5}, Shape{5});
  const Tensor s = cumsum(i, 0);
  EXPECT_EQ(s.dtype(), DType::Int64);
  EXPECT_EQ(s.to_vector<int64_t>(), (std::vector<int64_t>{3, 2, 6, 7, 2}));
  EXPECT_EQ(cumprod(i, 0).to_vector<int64_t>(), (std::vector<int64_t>{3, -3, -12, -12, 60}));
  const Tensor b = gt(tensor({1.0, -1.0, 2.0, 3.0}), 0.0);
  EXPECT_EQ(cumsum(b, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 2, 3}));
  // int64 arithmetic wraps (two's complement), as torch's does.
  const int64_t big = std::numeric_limits<int64_t>::max();
  const Tensor w = tensor(std::vector<int64_t>{big, 1}, Shape{2});
  EXPECT_EQ(cumsum(w, 0).to_vector<int64_t>()[1], std::numeric_limits<int64_t>::min());
}

TEST(Scan, SameBitsOnOneThreadAndTwoAndWideLanes) {
  Generator gen(9);
  // inner 700 spans several of the kernel's lane blocks; outer 3.
  const Tensor x = randn({3, 40, 700}, DType::Float32, &gen);
  const Tensor a = rand({3, 40, 700}, DType::Float32, &gen);
  const int before = get_num_threads();
  std::vector<std::vector<double>> runs;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    runs.push_back(values(cat({cumsum(x, 1).reshape({-1}), cumprod(a + 0.5, 1).reshape({-1}),
                               linear_recurrence(a, x, 1, true).reshape({-1})})));
  }
  set_num_threads(before);
  EXPECT_EQ(runs[0], runs[1]);
  expect_near(values(cumsum(x, 1)), oracle(Kind::Sum, {}, values(x), x.shape(), 1, false), 1e-7);
}

TEST(Scan, ZeroDimAndEmptyInputs) {
  const Tensor s = tensor({2.5}).reshape({});
  EXPECT_EQ(cumsum(s, 0).dim(), 0);
  EXPECT_EQ(cumprod(s, -1).item<double>(), 2.5);
  EXPECT_EQ(cumsum(zeros({2, 0}), 1).shape(), Shape({2, 0}));
  EXPECT_EQ(linear_recurrence(zeros({0, 3}), zeros({0, 3}), 0).shape(), Shape({0, 3}));
}

TEST(Scan, ErrorsNameTheOpShapesAndDtypes) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string dim = message([] { cumsum(zeros({2, 3}), 2); });
  EXPECT_NE(dim.find("cumsum"), std::string::npos) << dim;
  const std::string undefined = message([] { cumprod(Tensor(), 0); });
  EXPECT_NE(undefined.find("cumprod"), std::string::npos) << undefined;
  const std::string ints =
      message([] { linear_recurrence(zeros({3}), zeros({3}, DType::Int64), 0); });
  EXPECT_NE(ints.find("linear_recurrence"), std::string::npos) << ints;
  EXPECT_NE(ints.find("int64"), std::string::npos) << ints;
  const std::string shapes = message([] { linear_recurrence(zeros({3}), zeros({4}), 0); });
  EXPECT_NE(shapes.find("[3]"), std::string::npos) << shapes;
  EXPECT_NE(shapes.find("[4]"), std::string::npos) << shapes;
}

}  // namespace
}  // namespace adjoint
