// float32 products on every path (OpenBLAS, oneDNN, by size: Notes [OpenBLAS's core] and
// [float32 products by size] in src/backend/cpu/sgemm.cpp) against float64 products of the same
// inputs: each element within float32 accumulation error ((k + 2) * 2^-24 * sum |a_ip b_pj|).
// Covers the rule that picks the path, transposed views, batches, products split over the pool,
// linear with and without bias, matmul_add_into, k = 0, and the gradients of a layer.
#include <gtest/gtest.h>

#include <cblas.h>

#include <cmath>
#include <cstdlib>
#include <iostream>

#include "adjoint/adjoint.h"
#include "backend/cpu/sgemm.h"
#include "backend/kernels.h"
#include "core/cpu_features.h"
#include "support/matmul_oracle.h"

extern "C" char* openblas_get_corename(void);

using namespace adjoint;
using adjoint::testing::MatmulCase;
using kernels::SgemmPath;

namespace {

constexpr int kNoRounding = -1000;  // float32 results are not rounded again

std::vector<SgemmPath> paths() {
  std::vector<SgemmPath> out{SgemmPath::OpenBlas};
  if (kernels::sgemm_onednn_usable()) {
    out.push_back(SgemmPath::OneDnn);
    out.push_back(SgemmPath::BySize);
  }
  return out;
}

class PathGuard {
 public:
  explicit PathGuard(SgemmPath p) : prev_(kernels::set_sgemm_path(p)) {}
  ~PathGuard() { kernels::set_sgemm_path(prev_); }

 private:
  SgemmPath prev_;
};

// got against the float64 product: float32 accumulation error only, (k + 2) 2^-24 sum |a b|.
void expect_close(const Tensor& got, const Tensor& ref, const Tensor& mag, int64_t k,
                  const std::string& what) {
  ASSERT_EQ(got.dtype(), DType::Float32) << what;
  adjoint::testing::expect_within_product_bound(got, ref, mag, kNoRounding,
                                                static_cast<double>(k + 2), what);
}

TEST(SgemmPath, TheRule) {
  using kernels::choose_sgemm_path;
  // OpenBLAS 0.3.21 on Emerald Rapids: Prescott kernels on an AVX-512 CPU. Everything to oneDNN.
  EXPECT_EQ(choose_sgemm_path("Prescott", true, true, true), SgemmPath::OneDnn);
  EXPECT_EQ(choose_sgemm_path("Sandybridge", true, false, true), SgemmPath::OneDnn);
  // OpenBLAS's AVX2 and AVX-512 kernel sets, and any name it may add later: large products to
  // oneDNN on AVX-512 CPUs, where its kernels were measured faster, none on AVX2 ones.
  for (const char* core : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids", "New"}) {
    EXPECT_EQ(choose_sgemm_path(core, true, true, true), SgemmPath::BySize) << core;
    EXPECT_EQ(choose_sgemm_path(core, true, false, true), SgemmPath::OpenBlas) << core;
  }
  // An old CPU really is old: OpenBLAS's set is the right one.
  EXPECT_EQ(choose_sgemm_path("Prescott", false, false, true), SgemmPath::OpenBlas);
  // No oneDNN in the build: nothing else to run.
  EXPECT_EQ(choose_sgemm_path("Prescott", true, true, false), SgemmPath::OpenBlas);
  EXPECT_EQ(choose_sgemm_path("Cooperlake", true, true, false), SgemmPath::OpenBlas);
}

TEST(SgemmPath, AnOldCoreOnANewCpuGetsAdviceForWhatStaysOnOpenBlas) {
  using kernels::openblas_core_advice;
  const std::string avx512_bf16 = openblas_core_advice("Prescott", true, true, true);
  EXPECT_NE(avx512_bf16.find("OPENBLAS_CORETYPE=Cooperlake"), std::string::npos) << avx512_bf16;
  EXPECT_NE(avx512_bf16.find("float64"), std::string::npos) << avx512_bf16;
  EXPECT_NE(openblas_core_advice("Prescott", true, true, false).find("=SkylakeX"),
            std::string::npos);
  EXPECT_NE(openblas_core_advice("Nehalem", true, false, false).find("=Haswell"),
            std::string::npos);
  EXPECT_EQ(openblas_core_advice("Prescott", false, false, false), "");  // the CPU is old
  EXPECT_EQ(openblas_core_advice("Zen", true, false, false), "");
  EXPECT_EQ(openblas_core_advice("Cooperlake", true, true, true), "");
}

TEST(SgemmPath, BySizeSendsOnlyLargeProductsToOneDnn) {
  using kernels::by_size_takes_onednn;
  EXPECT_TRUE(by_size_takes_onednn(128, 128, 64));     // 2^20 multiply-adds
  EXPECT_TRUE(by_size_takes_onednn(1024, 768, 256));   // gpt-tiny's qkv, a row piece
  EXPECT_FALSE(by_size_takes_onednn(128, 128, 63));    // just under 2^20
  EXPECT_FALSE(by_size_takes_onednn(32, 1024, 1024));  // few rows
  EXPECT_FALSE(by_size_takes_onednn(1024, 16, 1024));  // few columns
  EXPECT_FALSE(by_size_takes_onednn(8, 8, 8));
}

TEST(SgemmPath, ThisMachineFollowsTheRule) {
  const std::string core = openblas_get_corename();
  const std::string name = kernels::sgemm_path_name();
  std::cout << "[ float32 gemm path: " << name << " ]\n";
  const char* env = std::getenv("ADJOINT_SGEMM");
  if (env == nullptr || *env == '\0') {
    const detail::CpuFeatures& cpu = detail::cpu_features();
    EXPECT_EQ(kernels::sgemm_path(), kernels::choose_sgemm_path(core, cpu.avx2, cpu.avx512,
                                                                kernels::sgemm_onednn_usable()))
        << core;
  }
  // ctest runs this once more with OPENBLAS_CORETYPE=Prescott (OpenBLAS on kernels older than
  // the CPU) and says which path must follow.
  if (const char* want = std::getenv("ADJOINT_TEST_EXPECT_SGEMM_PATH")) {
    if (std::string(want) == "onednn" &&
        (!detail::cpu_features().avx2 || !kernels::sgemm_onednn_usable()))
      GTEST_SKIP() << "needs AVX2 and oneDNN";
    EXPECT_EQ(name.rfind(want, 0), 0u) << name << " (OpenBLAS core " << core << ")";
    const detail::CpuFeatures& cpu = detail::cpu_features();
    EXPECT_NE(kernels::openblas_core_advice(core, cpu.avx2, cpu.avx512, cpu.avx512_bf16), "");
  }
  EXPECT_EQ(float32_matmul_backend(), name);
}

TEST(SgemmPath, MatmulMatchesFloat64OnEveryPath) {
  Generator gen(11);
  std::vector<MatmulCase> cases = adjoint::testing::common_matmul_cases();
  // Around oneDNN's size threshold (Note [float32 products by size]), both sides of it.
  cases.insert(cases.end(), {{{8, 700}, {700, 900}, false, false},
                             {{64, 16, 64}, {64, 64, 16}, false, false},
                             {{512, 256}, {256, 128}, true, false},
                             {{4, 128, 128}, {4, 128, 128}, false, false}});
  for (SgemmPath p : paths()) {
    PathGuard guard(p);
    for (const MatmulCase& c : cases) {
      const Tensor a = adjoint::testing::matmul_operand(c.a, c.ta, DType::Float32, gen);
      const Tensor b = adjoint::testing::matmul_operand(c.b, c.tb, DType::Float32, gen);
      const Tensor a64 = a.to(DType::Float64), b64 = b.to(DType::Float64);
      expect_close(matmul(a, b), matmul(a64, b64), matmul(a64.abs(), b64.abs()), a.size(-1),
                   "matmul " + kernels::sgemm_path_name());
    }
  }
}

TEST(SgemmPath, LinearAndMatmulAddInto) {
  Generator gen(12);
  for (SgemmPath p : paths()) {
    PathGuard guard(p);
    const std::string name = kernels::sgemm_path_name();
    Tensor x = randn({300, 48}, DType::Float32, &gen), w = randn({200, 48}, DType::Float32, &gen),
           b = randn({200}, DType::Float32, &gen);
    Tensor x64 = x.to(DType::Float64), w64 = w.to(DType::Float64), b64 = b.to(DType::Float64);
    Tensor mag = matmul(x64.abs(), w64.abs().t()) + b64.abs();
    expect_close(linear(x, w, b), matmul(x64, w64.t()) + b64, mag, 48, "linear " + name);
    expect_close(linear(x, w), matmul(x64, w64.t()), mag, 48, "linear without bias " + name);
    Tensor c = randn({300, 200}, DType::Float32, &gen);
    Tensor c64 = c.to(DType::Float64);
    kernels::matmul_add_into(c, x, w.t());  // c += a b, beta 1
    expect_close(c, c64 + matmul(x64, w64.t()), mag + c64.abs(), 48, "matmul_add_into " + name);
    // k = 0: the bias alone, and zeros.
    Tensor e = linear(zeros({3, 0}), zeros({2, 0}), b.slice(0, 0, 2));
    EXPECT_EQ(e.to_vector<double>(),
              expand(b.slice(0, 0, 2), {3, 2}).contiguous().to_vector<double>());
    EXPECT_EQ(matmul(zeros({2, 0}), zeros({0, 3})).to_vector<double>(),
              std::vector<double>(6, 0.0));
  }
}

TEST(SgemmPath, ALayersGradientsOnEveryPath) {
  Generator gen(13);
  Tensor x = randn({128, 784}, DType::Float32, &gen), w = randn({256, 784}, DType::Float32, &gen);
  Tensor r = randn({128, 256}, DType::Float32, &gen);
  Tensor x64 = x.to(DType::Float64), w64 = w.to(DType::Float64), r64 = r.to(DType::Float64);
  // loss = sum(linear(x, W) * R): the output's gradient is R exactly, so dW = Rᵀ x (k = 128) and
  // dx = R W (k = 256) are single products whose float64 values are the oracle.
  for (SgemmPath p : paths()) {
    PathGuard guard(p);
    Tensor wl = w.detach().requires_grad_(true), xl = x.detach().requires_grad_(true);
    (linear(xl, wl) * r).sum().backward();
    const std::string name = kernels::sgemm_path_name();
    expect_close(wl.grad(), matmul(r64.t(), x64), matmul(r64.abs().t(), x64.abs()), 128,
                 "dW " + name);
    expect_close(xl.grad(), matmul(r64, w64), matmul(r64.abs(), w64.abs()), 256, "dx " + name);
  }
}

TEST(SgemmPath, ForcingOneDnnWithoutItIsAnError) {
  if (kernels::sgemm_onednn_usable()) GTEST_SKIP() << "oneDNN is in this build";
  EXPECT_THROW(kernels::set_sgemm_path(SgemmPath::OneDnn), Error);
  EXPECT_THROW(kernels::set_sgemm_path(SgemmPath::BySize), Error);
}

}  // namespace
