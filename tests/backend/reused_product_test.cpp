// The product with a reused right operand (src/backend/cpu/reused_product.h) against a plain
// loop in float64, on both float32 paths (B packed once for oneDNN, and OpenBLAS on B as it is)
// and in float64: both layouts of B, row strides wider than the rows, accumulating or not, and
// the same object run with several left operands (the reuse it is for).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/reused_product.h"
#include "backend/cpu/sgemm.h"

namespace adjoint::kernels {
namespace {

template <class T>
std::vector<T> random_values(std::size_t n, std::mt19937& gen) {
  std::normal_distribution<double> d;
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(d(gen));
  return v;
}

struct Shape3 {
  int64_t m, n, k;
};

template <class T>
void check(const Shape3& s, bool trans_b, bool accumulate, double tolerance) {
  SCOPED_TRACE(::testing::Message()
               << "m " << s.m << " n " << s.n << " k " << s.k << (trans_b ? " trans_b" : "")
               << (accumulate ? " accumulate" : ""));
  std::mt19937 gen(static_cast<unsigned>(s.m * 131 + s.n * 17 + s.k));
  const int64_t lda = s.k + 3, ldc = s.n + 5;
  const int64_t ldb = (trans_b ? s.k : s.n) + 2, b_rows = trans_b ? s.n : s.k;
  const std::vector<T> b = random_values<T>(static_cast<std::size_t>(b_rows * ldb), gen);
  const ReusedProduct<T> product(s.m, s.n, s.k, b.data(), ldb, trans_b, lda, ldc, accumulate);
  for (int call = 0; call < 3; ++call) {
    const std::vector<T> a = random_values<T>(static_cast<std::size_t>(s.m * lda), gen);
    std::vector<T> c = random_values<T>(static_cast<std::size_t>(s.m * ldc), gen);
    const std::vector<T> before = c;
    product.run(a.data(), c.data());
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < ldc; ++j) {
        const std::size_t at = static_cast<std::size_t>(i * ldc + j);
        if (j >= s.n) {  // the padding between rows is left alone
          ASSERT_EQ(c[at], before[at]);
          continue;
        }
        double want = accumulate ? static_cast<double>(before[at]) : 0.0, scale = 1.0;
        for (int64_t p = 0; p < s.k; ++p) {
          const double bv = trans_b ? b[static_cast<std::size_t>(j * ldb + p)]
                                    : b[static_cast<std::size_t>(p * ldb + j)];
          const double term = static_cast<double>(a[static_cast<std::size_t>(i * lda + p)]) * bv;
          want += term;
          scale += std::abs(term);
        }
        ASSERT_LE(std::abs(static_cast<double>(c[at]) - want), tolerance * scale)
            << "call " << call << " at (" << i << ", " << j << ")";
      }
    }
  }
}

template <class T>
void check_all(double tolerance) {
  for (const Shape3& s :
       {Shape3{32, 1024, 64}, Shape3{5, 7, 3}, Shape3{1, 1, 1}, Shape3{3, 96, 130}})
    for (bool trans_b : {false, true})
      for (bool accumulate : {false, true}) check<T>(s, trans_b, accumulate, tolerance);
}

TEST(ReusedProduct, Float32OnEachPathMatchesTheLoop) {
  std::vector<SgemmPath> paths{SgemmPath::OpenBlas};
  if (sgemm_onednn_usable()) paths.push_back(SgemmPath::BySize);
  for (SgemmPath path : paths) {
    const SgemmPath before = set_sgemm_path(path);
    SCOPED_TRACE(path == SgemmPath::OpenBlas ? "openblas" : "onednn");
    {
      const ReusedProduct<float> probe(4, 4, 4, std::vector<float>(16).data(), 4, false, 4, 4,
                                       false);
      EXPECT_EQ(probe.packed(), path != SgemmPath::OpenBlas);
    }
    check_all<float>(1e-5);
    set_sgemm_path(before);
  }
}

TEST(ReusedProduct, Float64MatchesTheLoop) { check_all<double>(1e-13); }

TEST(ReusedProduct, AnEmptyProductWritesNothingOrZeros) {
  std::vector<float> b(4, 1.0f), a(4, 1.0f), c(4, 7.0f);
  ReusedProduct<float>(0, 2, 2, b.data(), 2, false, 2, 2, false).run(a.data(), c.data());
  EXPECT_EQ(c, std::vector<float>(4, 7.0f));
  ReusedProduct<float>(2, 2, 0, b.data(), 2, false, 2, 2, true).run(a.data(), c.data());
  EXPECT_EQ(c, std::vector<float>(4, 7.0f));
  ReusedProduct<float>(2, 2, 0, b.data(), 2, false, 2, 2, false).run(a.data(), c.data());
  EXPECT_EQ(c, std::vector<float>(4, 0.0f));
}

}  // namespace
}  // namespace adjoint::kernels
