// bfloat16 matrix products on every path this machine has (oneDNN where the CPU multiplies
// bfloat16, widened float32 sgemm always) against float64 products of the same bfloat16
// inputs: each result element within one rounding to bfloat16 plus float32 accumulation error
// (k * 2^-23 * sum |a_ip b_pj|). Covers transposed views, batches (broadcast too), linear with
// and without bias, matmul_add_into, and k = 0.
#include <gtest/gtest.h>

#include <cmath>

#include "adjoint/adjoint.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/kernels.h"

using namespace adjoint;
using kernels::Bf16GemmPath;

namespace {

std::vector<Bf16GemmPath> paths() {
  std::vector<Bf16GemmPath> out{Bf16GemmPath::Sgemm};
  if (kernels::bf16_gemm_onednn_usable()) out.push_back(Bf16GemmPath::OneDnn);
  return out;
}

class PathGuard {
 public:
  explicit PathGuard(Bf16GemmPath p) : prev_(kernels::set_bf16_gemm_path(p)) {}
  ~PathGuard() { kernels::set_bf16_gemm_path(prev_); }

 private:
  Bf16GemmPath prev_;
};

// got (bfloat16) against the float64 product `ref` and the bound of |a| |b| products `mag`.
void expect_close(const Tensor& got, const Tensor& ref, const Tensor& mag, int64_t k,
                  const std::string& what) {
  ASSERT_EQ(got.dtype(), DType::BFloat16) << what;
  ASSERT_EQ(got.shape(), ref.shape()) << what;
  const std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>(),
                            m = mag.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double bound =
        std::ldexp(std::abs(r[i]), -8) + static_cast<double>(k + 1) * std::ldexp(m[i], -23) + 1e-30;
    ASSERT_LE(std::abs(g[i] - r[i]), bound)
        << what << " element " << i << ": " << g[i] << " vs " << r[i];
  }
}

Tensor bf16_randn(const Shape& s, Generator& gen) {
  return randn(s, DType::Float32, &gen).to(DType::BFloat16);
}

TEST(GemmBf16, ThisMachineReportsItsPath) {
  const std::string name = kernels::bf16_gemm_path_name();
  if (kernels::bf16_gemm_onednn_usable()) {
    EXPECT_EQ(name.rfind("onednn:", 0), 0u) << name;
  } else {
    EXPECT_EQ(name, "sgemm");
  }
  std::cout << "[ bf16 gemm path: " << name << " ]\n";
}

TEST(GemmBf16, MatmulMatchesFloat64OnEveryPath) {
  Generator gen(7);
  struct Case {
    Shape a, b;
    bool ta, tb;  // operands given as transposed views
  };
  const Case cases[] = {
      {{128, 784}, {784, 300}, false, false},  {{5, 3}, {3, 4}, false, false},
      {{64, 96}, {96, 80}, true, false},       {{64, 96}, {96, 80}, false, true},
      {{33, 17}, {17, 65}, true, true},        {{4, 8, 16}, {4, 16, 8}, false, false},
      {{3, 2, 9, 5}, {5, 7}, false, false},    {{1, 1}, {1, 1}, false, false},
      {{256, 1024}, {1024, 256}, false, true},
  };
  for (Bf16GemmPath p : paths()) {
    PathGuard guard(p);
    for (const Case& c : cases) {
      // A transposed operand (2-d cases only) is made in the other orientation and viewed back.
      Tensor a = c.ta ? bf16_randn({c.a[1], c.a[0]}, gen).t() : bf16_randn(c.a, gen);
      Tensor b = c.tb ? bf16_randn({c.b[1], c.b[0]}, gen).t() : bf16_randn(c.b, gen);
      Tensor got = matmul(a, b);
      Tensor a64 = a.to(DType::Float64), b64 = b.to(DType::Float64);
      expect_close(got, matmul(a64, b64), matmul(a64.abs(), b64.abs()), a.size(-1),
                   "matmul " + kernels::bf16_gemm_path_name());
    }
  }
}

TEST(GemmBf16, LinearAndMatmulAddIntoAddInFloat32) {
  Generator gen(8);
  for (Bf16GemmPath p : paths()) {
    PathGuard guard(p);
    const std::string name = kernels::bf16_gemm_path_name();
    Tensor x = bf16_randn({100, 48}, gen), w = bf16_randn({20, 48}, gen), b = bf16_randn({20}, gen);
    Tensor x64 = x.to(DType::Float64), w64 = w.to(DType::Float64), b64 = b.to(DType::Float64);
    Tensor mag = matmul(x64.abs(), w64.abs().t()) + b64.abs();
    expect_close(linear(x, w, b), matmul(x64, w64.t()) + b64, mag, 48, "linear " + name);
    expect_close(linear(x, w), matmul(x64, w64.t()), mag, 48, "linear without bias " + name);
    // kernels::matmul_add_into: c += a b, beta 1.
    Tensor c = bf16_randn({100, 20}, gen);
    Tensor c64 = c.to(DType::Float64);
    kernels::matmul_add_into(c, x, w.t());
    expect_close(c, c64 + matmul(x64, w64.t()), mag + c64.abs(), 48, "matmul_add_into " + name);
    // k = 0: the bias alone, and zeros.
    Tensor e =
        linear(zeros({3, 0}, DType::BFloat16), zeros({2, 0}, DType::BFloat16), b.slice(0, 0, 2));
    EXPECT_EQ(e.to_vector<double>(),
              expand(b.slice(0, 0, 2), {3, 2}).contiguous().to_vector<double>());
    EXPECT_EQ(
        matmul(zeros({2, 0}, DType::BFloat16), zeros({0, 3}, DType::BFloat16)).to_vector<double>(),
        std::vector<double>(6, 0.0));
  }
}

TEST(GemmBf16, PathsAgreeOnAnMlpLayerAndItsGradients) {
  if (!kernels::bf16_gemm_onednn_usable()) GTEST_SKIP() << "one path on this machine (sgemm)";
  Generator gen(9);
  Tensor x = bf16_randn({128, 784}, gen), w = bf16_randn({1024, 784}, gen) * 0.03;
  std::vector<std::vector<double>> outs;
  for (Bf16GemmPath p : paths()) {
    PathGuard guard(p);
    Tensor wl = w.detach().requires_grad_(true);
    Tensor y = linear(x, wl);
    y.sum().backward();
    outs.push_back(y.to_vector<double>());
    outs.push_back(wl.grad().to_vector<double>());
  }
  // Same inputs, float32 accumulation in different orders: within one bfloat16 rounding step.
  for (std::size_t k = 0; k < 2; ++k)
    for (std::size_t i = 0; i < outs[k].size(); ++i)
      ASSERT_NEAR(outs[k][i], outs[k + 2][i], std::ldexp(std::abs(outs[k][i]), -7) + 1e-6)
          << k << " " << i;
}

TEST(GemmBf16, ForcingOneDnnWithoutItIsAnError) {
  if (kernels::bf16_gemm_onednn_usable()) GTEST_SKIP() << "oneDNN is usable here";
  EXPECT_THROW(kernels::set_bf16_gemm_path(Bf16GemmPath::OneDnn), Error);
}

}  // namespace
