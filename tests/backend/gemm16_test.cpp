// bfloat16 and float16 matrix products on every path this machine has (oneDNN where the CPU
// multiplies bfloat16, the packed AVX2 kernel where the CPU has AVX2, widened float32 copies and
// sgemm always) against float64 products of the same 16-bit inputs: each result element within
// one rounding to the 16-bit dtype plus float32 accumulation error (k * 2^-23 * sum |a_ip b_pj|).
// Covers transposed views, batches (broadcast too), shapes across the packed kernel's blocks and
// tiles, linear with and without bias, matmul_add_into, the widened add into float32, and k = 0.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "adjoint/adjoint.h"
#include "adjoint/mixed_precision.h"
#include "backend/cpu/gemm16.h"
#include "backend/cpu/gemm_packed16.h"
#include "backend/kernels.h"
#include "core/cpu_features.h"
#include "support/matmul_oracle.h"

using namespace adjoint;
using adjoint::testing::MatmulCase;
using kernels::Gemm16Path;

namespace {

const DType kDtypes[] = {DType::BFloat16, DType::Float16};

std::vector<Gemm16Path> paths(DType dtype) {
  std::vector<Gemm16Path> out;
  for (Gemm16Path p : {Gemm16Path::Widened, Gemm16Path::Packed, Gemm16Path::OneDnn})
    if (kernels::gemm16_path_usable(dtype, p)) out.push_back(p);
  return out;
}

class PathGuard {
 public:
  PathGuard(DType dtype, Gemm16Path p) : dtype_(dtype), prev_(kernels::set_gemm16_path(dtype, p)) {}
  ~PathGuard() { kernels::set_gemm16_path(dtype_, prev_); }

 private:
  DType dtype_;
  Gemm16Path prev_;
};

// The unit roundoff of the 16-bit result: 2^-8 for bfloat16, 2^-11 for float16.
int rounding_exponent(DType dtype) { return dtype == DType::BFloat16 ? -8 : -11; }

// got (16-bit, or float32 for an unrounded product) against the float64 product `ref` and the
// bound of |a| |b| products `mag`: one rounding of the result, and (k + 1) 2^-23 of mag for the
// float32 sums in their several orders.
void expect_close(const Tensor& got, const Tensor& ref, const Tensor& mag, int64_t k, DType dtype,
                  const std::string& what) {
  const int e = got.dtype() == DType::Float32 ? -24 : rounding_exponent(dtype);
  adjoint::testing::expect_within_product_bound(got, ref, mag, e, 2.0 * static_cast<double>(k + 1),
                                                what);
}

Tensor randn16(const Shape& s, DType dtype, Generator& gen) {
  return randn(s, DType::Float32, &gen).to(dtype);
}

std::string describe(DType dtype) {
  return std::string(to_string(dtype)) + " on " + kernels::gemm16_path_name(dtype);
}

TEST(Gemm16, ThisMachineReportsItsPaths) {
  if (std::getenv("ADJOINT_GEMM16") != nullptr) GTEST_SKIP() << "ADJOINT_GEMM16 chooses the path";
  const detail::CpuFeatures& f = detail::cpu_features();
  const bool packed = f.avx2 && f.f16c && !f.avx512;
  for (DType dtype : kDtypes) {
    const std::string name = kernels::gemm16_path_name(dtype);
    if (dtype == DType::BFloat16 && kernels::gemm16_path_usable(dtype, Gemm16Path::OneDnn)) {
      EXPECT_EQ(name.rfind("onednn:", 0), 0u) << name;
    } else {
      EXPECT_EQ(name, packed ? "packed:avx2" : "sgemm") << to_string(dtype);
    }
  }
  EXPECT_EQ(bf16_matmul_backend(), kernels::gemm16_path_name(DType::BFloat16));
  EXPECT_EQ(float16_matmul_backend(), kernels::gemm16_path_name(DType::Float16));
  std::cout << "[ bfloat16 gemm path: " << bf16_matmul_backend()
            << ", float16: " << float16_matmul_backend() << " ]\n";
}

TEST(Gemm16, MatmulMatchesFloat64OnEveryPath) {
  Generator gen(7);
  std::vector<MatmulCase> cases = adjoint::testing::common_matmul_cases();
  // Across the packed kernel's blocks: k over one 256 block (equal blocks of whole 8s and a
  // tail), columns over one 1024 block, rows over one 72 block, edges of the 6 x 16 tile.
  cases.insert(cases.end(), {{{77, 600}, {600, 35}, false, true},
                             {{80, 517}, {517, 1100}, true, false},
                             {{7, 13}, {13, 1041}, true, true},
                             {{150, 9}, {9, 17}, false, false}});
  for (DType dtype : kDtypes)
    for (Gemm16Path p : paths(dtype)) {
      PathGuard guard(dtype, p);
      for (const MatmulCase& c : cases) {
        const Tensor a = adjoint::testing::matmul_operand(c.a, c.ta, dtype, gen);
        const Tensor b = adjoint::testing::matmul_operand(c.b, c.tb, dtype, gen);
        const Tensor got = matmul(a, b);
        ASSERT_EQ(got.dtype(), dtype);
        const Tensor a64 = a.to(DType::Float64), b64 = b.to(DType::Float64);
        expect_close(got, matmul(a64, b64), matmul(a64.abs(), b64.abs()), a.size(-1), dtype,
                     "matmul " + describe(dtype));
      }
    }
}

TEST(Gemm16, LinearAndMatmulAddIntoAddInFloat32) {
  Generator gen(8);
  for (DType dtype : kDtypes)
    for (Gemm16Path p : paths(dtype)) {
      PathGuard guard(dtype, p);
      const std::string name = describe(dtype);
      Tensor x = randn16({100, 48}, dtype, gen), w = randn16({20, 48}, dtype, gen),
             b = randn16({20}, dtype, gen);
      Tensor x64 = x.to(DType::Float64), w64 = w.to(DType::Float64), b64 = b.to(DType::Float64);
      Tensor mag = matmul(x64.abs(), w64.abs().t()) + b64.abs();
      expect_close(linear(x, w, b), matmul(x64, w64.t()) + b64, mag, 48, dtype, "linear " + name);
      expect_close(linear(x, w), matmul(x64, w64.t()), mag, 48, dtype,
                   "linear without bias " + name);
      // kernels::matmul_add_into: c += a b, beta 1.
      Tensor c = randn16({100, 20}, dtype, gen);
      Tensor c64 = c.to(DType::Float64);
      kernels::matmul_add_into(c, x, w.t());
      expect_close(c, c64 + matmul(x64, w64.t()), mag + c64.abs(), 48, dtype,
                   "matmul_add_into " + name);
      // k = 0: the bias alone, and zeros.
      Tensor e = linear(zeros({3, 0}, dtype), zeros({2, 0}, dtype), b.slice(0, 0, 2));
      EXPECT_EQ(e.to_vector<double>(),
                expand(b.slice(0, 0, 2), {3, 2}).contiguous().to_vector<double>());
      EXPECT_EQ(matmul(zeros({2, 0}, dtype), zeros({0, 3}, dtype)).to_vector<double>(),
                std::vector<double>(6, 0.0));
    }
}

// c += float32(matmul(a, b)) must give the bits of the 16-bit product on its own path (a weight
// gradient through autocast's cast), for tiles of several rows and columns and a transposed a.
// On the packed path each element's sum depends on k alone, and on oneDNN's the product is the
// same call; on the widened path sgemm's pieces and tiles differ in shape, and oneDNN's float32
// kernels (Note [float32 products by size]) may sum a piece in a shape-dependent order, so there
// the two agree within the product's 16-bit rounding.
TEST(Gemm16, WidenedAddIntoHasTheBitsOfTheProduct) {
  Generator gen(10);
  for (DType dtype : kDtypes)
    for (Gemm16Path p : paths(dtype)) {
      PathGuard guard(dtype, p);
      for (const Shape& mkn : {Shape{1024, 128, 1100}, Shape{37, 300, 19}}) {
        Tensor a = randn16({mkn[1], mkn[0]}, dtype, gen).t();  // gᵀ as a view, as in dW = gᵀ x
        Tensor b = randn16({mkn[1], mkn[2]}, dtype, gen);
        Tensor c = randn({mkn[0], mkn[2]}, DType::Float32, &gen);
        // The reference product on one thread, the add on the pool: different splits.
        const int threads = get_num_threads();
        set_num_threads(1);
        const Tensor product = matmul(a, b).to(DType::Float32);
        set_num_threads(threads);
        Tensor expected = c + product;
        kernels::matmul_widened_add_into(c, a, b);
        if (p != Gemm16Path::Widened) {
          ASSERT_EQ(c.to_vector<float>(), expected.to_vector<float>()) << describe(dtype);
          continue;
        }
        // One 16-bit step of the product, the two float32 sums' difference, and c's rounding.
        const Tensor mag = matmul(a.to(DType::Float64).abs(), b.to(DType::Float64).abs());
        const std::vector<double> got = c.to_vector<double>(), want = expected.to_vector<double>(),
                                  prod = product.to_vector<double>(), sum = mag.to_vector<double>();
        for (std::size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i],
                      std::ldexp(std::abs(prod[i]), rounding_exponent(dtype) + 1) +
                          static_cast<double>(mkn[1] + 1) * std::ldexp(sum[i], -23) +
                          std::ldexp(std::abs(want[i]), -22))
              << describe(dtype) << " element " << i;
      }
    }
}

TEST(Gemm16, PathsAgreeOnAnMlpLayerAndItsGradients) {
  Generator gen(9);
  for (DType dtype : kDtypes) {
    Tensor x = randn16({128, 784}, dtype, gen), w = randn16({1024, 784}, dtype, gen) * 0.03;
    std::vector<std::vector<double>> outs;
    for (Gemm16Path p : paths(dtype)) {
      PathGuard guard(dtype, p);
      Tensor wl = w.detach().requires_grad_(true);
      Tensor y = linear(x, wl);
      y.sum().backward();
      outs.push_back(y.to_vector<double>());
      outs.push_back(wl.grad().to_vector<double>());
    }
    if (outs.size() < 4) GTEST_SKIP() << "one path on this CPU (sgemm)";
    // Same inputs, float32 accumulation in different orders: within one rounding step.
    const int e = rounding_exponent(dtype) + 1;
    for (std::size_t q = 2; q < outs.size(); ++q)
      for (std::size_t i = 0; i < outs[q].size(); ++i)
        ASSERT_NEAR(outs[q % 2][i], outs[q][i], std::ldexp(std::abs(outs[q % 2][i]), e) + 1e-6)
            << to_string(dtype) << " output " << q << " element " << i;
  }
}

// The packed kernel alone, against a float64 loop, for both 16-bit types: beta 0 and 1, every
// transpose, leading dimensions larger than the matrices, C's padding left alone, and shapes
// within one block and across several (rows over 72, columns over 1024, k over 256).
TEST(Gemm16, PackedKernelHonoursStridesAndBeta) {
  if (!kernels::gemm_packed16_supported()) GTEST_SKIP() << "no AVX2, FMA and F16C here";
  Generator gen(11);
  auto check = [&]<class H>(int64_t m, int64_t n, int64_t k) {
    const DType dtype = dtype_of_v<H>;
    const int64_t lda = std::max(m, k) + 7, ldc = n + 5;
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f}) {
          const int64_t ldb = (tb ? k : n) + 3;  // B's rows in memory are k long, or n
          // Storage for A as (m x lda) or (k x lda), B as (k x ldb) or (n x ldb).
          Tensor a = randn16({ta ? k : m, lda}, dtype, gen);
          Tensor b = randn16({tb ? n : k, ldb}, dtype, gen);
          Tensor c = randn({m, ldc}, DType::Float32, &gen);
          const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(),
                                    c0 = c.to_vector<double>();
          kernels::gemm_packed16(ta, tb, m, n, k, a.data_ptr<H>(), lda, b.data_ptr<H>(), ldb, beta,
                                 c.data_ptr<float>(), ldc);
          const std::vector<double> got = c.to_vector<double>();
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < ldc; ++j) {
              if (j >= n) {
                ASSERT_EQ(got[i * ldc + j], c0[i * ldc + j]) << "padding " << i << " " << j;
                continue;
              }
              double ref = beta * c0[i * ldc + j], mag = std::abs(ref);
              for (int64_t p = 0; p < k; ++p) {
                const double x = ta ? av[p * lda + i] : av[i * lda + p];
                const double y = tb ? bv[j * ldb + p] : bv[p * ldb + j];
                ref += x * y;
                mag += std::abs(x * y);
              }
              ASSERT_LE(std::abs(got[i * ldc + j] - ref), (k + 2) * std::ldexp(mag, -23))
                  << to_string(dtype) << " " << m << "x" << n << "x" << k << " trans " << ta << tb
                  << " beta " << beta << " at " << i << " " << j;
            }
        }
  };
  check.operator()<BFloat16>(31, 45, 270);
  check.operator()<Half>(31, 45, 270);
  check.operator()<BFloat16>(80, 1040, 20);
  check.operator()<Half>(150, 40, 530);
}

// The packed kernel's rounding add, sum by sum, against the cast: a float32 x split into three
// bfloat16 parts (x = h + m + l exactly, 8 significant bits each) is the kernel's k = 3 sum of
// those parts times one, so c += widen(bfloat16(x)) must give the cast's bits for every x: ties
// on both sides of even across every exponent, and infinities and NaNs (made quiet, top bits
// kept). float32 subnormals do not split into bfloat16 parts and are left to the cast's own
// exhaustive test.
TEST(Gemm16, PackedAddRoundedRoundsAsTheCast) {
  if (!kernels::gemm_packed16_supported()) GTEST_SKIP() << "no AVX2, FMA and F16C here";
  auto truncate = [](float v) {
    return std::bit_cast<float>(std::bit_cast<uint32_t>(v) & ~0xffffu);
  };
  std::vector<float> xs;
  std::vector<BFloat16> h, m, l;
  for (uint32_t top = 0; top < 65536; top += 3)  // a tie below every third bfloat16 pattern
    for (uint32_t low : {0x8000u, 0x7fffu, 0x8001u, 0x1234u}) {
      const float x = std::bit_cast<float>(top << 16 | low);
      if (!std::isfinite(x)) continue;
      const float hi = truncate(x), r = x - hi, mid = truncate(r), lo = r - mid;
      if (static_cast<float>(BFloat16(lo)) != lo) continue;  // a subnormal: not three parts
      xs.push_back(x);
      h.push_back(BFloat16(hi));
      m.push_back(BFloat16(mid));
      l.push_back(BFloat16(lo));
    }
  const int64_t n = static_cast<int64_t>(xs.size());
  ASSERT_GT(n, 70000);
  std::vector<BFloat16> b = h, a(3, BFloat16(1.0f));
  b.insert(b.end(), m.begin(), m.end());
  b.insert(b.end(), l.begin(), l.end());
  std::vector<float> c(n, 0.0f);
  kernels::gemm_packed16_add_rounded(false, false, 1, n, 3, a.data(), 3, b.data(), n, c.data(), n);
  const std::vector<float> want =
      tensor(xs, Shape{n}).to(DType::BFloat16).to(DType::Float32).to_vector<float>();
  for (int64_t j = 0; j < n; ++j)
    ASSERT_EQ(std::bit_cast<uint32_t>(c[j]), std::bit_cast<uint32_t>(0.0f + want[j]))
        << "x bits " << std::hex << std::bit_cast<uint32_t>(xs[j]);
  // Infinities and NaNs as the sum's first part alone (the others zero).
  for (float x : {INFINITY, -INFINITY, std::bit_cast<float>(0x7f812345u),
                  std::bit_cast<float>(0xffc0abcdu)}) {
    std::vector<BFloat16> parts = {BFloat16(0.0f), BFloat16(0.0f), BFloat16(0.0f)};
    parts[0].bits = static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16);
    float got = 0.0f;
    kernels::gemm_packed16_add_rounded(false, false, 1, 1, 3, a.data(), 3, parts.data(), 1, &got,
                                       1);
    const float sum = static_cast<float>(parts[0]);
    const float want1 = tensor(std::vector<float>{sum}, Shape{1})
                            .to(DType::BFloat16)
                            .to(DType::Float32)
                            .to_vector<float>()[0];
    EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(0.0f + want1))
        << std::hex << std::bit_cast<uint32_t>(x);
  }
}

TEST(Gemm16, ForcingAPathItCannotRunIsAnError) {
  EXPECT_THROW(kernels::set_gemm16_path(DType::Float16, Gemm16Path::OneDnn), Error);
  if (!kernels::gemm16_path_usable(DType::BFloat16, Gemm16Path::OneDnn)) {
    EXPECT_THROW(kernels::set_gemm16_path(DType::BFloat16, Gemm16Path::OneDnn), Error);
  }
  if (!kernels::gemm_packed16_supported()) {
    EXPECT_THROW(kernels::set_gemm16_path(DType::BFloat16, Gemm16Path::Packed), Error);
  }
}

}  // namespace
