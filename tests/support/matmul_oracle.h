// The oracle shared by the matrix-product path tests (float32 in sgemm_path_test.cpp, 16-bit in
// gemm16_test.cpp): float64 products of the same inputs, the shapes every path must take, and
// an element-by-element bound of one rounding of the result plus float32 accumulation error.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"

namespace adjoint::testing {

/// A product's operand shapes, each given as a transposed view when its flag is set (2-d only).
struct MatmulCase {
  Shape a, b;
  bool ta, tb;
};

/// Shapes every path takes: square and odd sizes, each transpose, batches (broadcast too), 1 x 1,
/// and products large enough to split over the pool.
inline std::vector<MatmulCase> common_matmul_cases() {
  return {
      {{128, 784}, {784, 300}, false, false},  {{5, 3}, {3, 4}, false, false},
      {{64, 96}, {96, 80}, true, false},       {{64, 96}, {96, 80}, false, true},
      {{33, 17}, {17, 65}, true, true},        {{4, 8, 16}, {4, 16, 8}, false, false},
      {{3, 2, 9, 5}, {5, 7}, false, false},    {{1, 1}, {1, 1}, false, false},
      {{256, 1024}, {1024, 256}, false, true},
  };
}

/// A standard-normal operand of `shape` in `dtype` (drawn in float32 and rounded), made in the
/// other orientation and viewed back when `transposed`.
inline Tensor matmul_operand(const Shape& shape, bool transposed, DType dtype, Generator& gen) {
  if (!transposed) return randn(shape, DType::Float32, &gen).to(dtype);
  return randn({shape[1], shape[0]}, DType::Float32, &gen).to(dtype).t();
}

/// |got - ref| <= 2^result_exp |ref| + accumulation * 2^-24 mag for every element: ref is the
/// float64 product, mag the float64 product of the absolute values, result_exp the unit roundoff
/// of a rounded result (very negative for none), accumulation the float32 error terms (k + 2).
inline void expect_within_product_bound(const Tensor& got, const Tensor& ref, const Tensor& mag,
                                        int result_exp, double accumulation,
                                        const std::string& what) {
  ASSERT_EQ(got.shape(), ref.shape()) << what;
  const std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>(),
                            m = mag.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double bound =
        std::ldexp(std::abs(r[i]), result_exp) + accumulation * std::ldexp(m[i], -24) + 1e-30;
    ASSERT_LE(std::abs(g[i] - r[i]), bound)
        << what << " element " << i << ": " << g[i] << " vs " << r[i];
  }
}

}  // namespace adjoint::testing
