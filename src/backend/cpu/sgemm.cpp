#include "backend/cpu/sgemm.h"

#include <cblas.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "adjoint/error.h"
#include "backend/cpu/onednn_cpu.h"
#include "core/cpu_features.h"

extern "C" char* openblas_get_corename(void);

namespace adjoint::kernels {
namespace {

// Note [OpenBLAS's core]
// Debian's OpenBLAS is built with DYNAMIC_ARCH: when it loads it picks a kernel set ("core") by
// the CPU's family and model. A CPU newer than the release falls back to the oldest x86-64 set,
// Prescott (SSE3): OpenBLAS 0.3.21 does that on Intel's Emerald Rapids (family 6, model 207),
// whose float32 products then ran at 26-36 GFLOP/s on 2 threads against 181-328 for oneDNN's
// kernels on the same cores, and float32 training steps 5-7x slower (gpt-tiny 1508 against 278
// ms; docs/mixed-precision.md, "float32 products: OpenBLAS and oneDNN"). OPENBLAS_CORETYPE
// would fix it, but OpenBLAS reads it when the library loads, before any of our code runs. So
// float32 products go to oneDNN's sgemm instead, which chooses its kernels by CPUID features
// rather than model numbers, when OpenBLAS's core is one of the sets below (none has AVX2
// kernels) and the CPU has AVX2 and FMA. float64 products and LAPACK stay on OpenBLAS, so the
// first product of either kind also says on stderr which OPENBLAS_CORETYPE would speed them up.
// ADJOINT_SGEMM=openblas|onednn|bysize overrides the rule.
constexpr std::array<std::string_view, 20> kCoresWithoutAvx2{
    "Katmai", "Coppermine", "Northwood",  "Prescott",    "Banias",      "Atom",         "Core2",
    "Penryn", "Dunnington", "Nehalem",    "Athlon",      "Opteron",     "Opteron_SSE3", "Barcelona",
    "Bobcat", "Bulldozer",  "Piledriver", "Steamroller", "Sandybridge", "Nano"};

bool is_old_core(std::string_view core) {
  return std::find(kCoresWithoutAvx2.begin(), kCoresWithoutAvx2.end(), core) !=
         kCoresWithoutAvx2.end();
}

// Note [float32 products by size]
// On an AVX-512 CPU whose OpenBLAS core is right (Zen 4: Cooperlake), oneDNN's float32 kernels
// were still faster for all but small products. Single-threaded, as the pool runs each piece,
// oneDNN took 0.80-0.93 of OpenBLAS's time from 64 rows, 32 columns and 2^20 multiply-adds up,
// and 1.1-1.8 times below that (docs/mixed-precision.md has the grid). So on AVX-512 CPUs each
// product (each piece of a split one) goes to oneDNN when it is that large, and stays on
// OpenBLAS otherwise. The choice is a function of the piece's shape, which the thread count
// fixes (Note [Gemm threading]), so results never depend on timing. Alternating whole
// workloads, float32 training steps took 0.84-0.92 of their time (gpt-tiny, mlp, deep-mlp). On
// AVX2 CPUs the one measurement (Zen 3's ISA emulated on Zen 4) was mixed: faster up to 256 on
// a side, 1.47 times slower at 512. Those stay on OpenBLAS.

std::atomic<int> forced_path{-1};

SgemmPath default_path() {
  static const SgemmPath path = [] {
    const char* core = openblas_get_corename();
    const detail::CpuFeatures& cpu = detail::cpu_features();
    SgemmPath p = choose_sgemm_path(core ? core : "", cpu.avx2, cpu.avx512, sgemm_onednn_usable());
    warn_if_openblas_core_is_old();
    if (const char* env = std::getenv("ADJOINT_SGEMM"); env && *env) {
      const std::string_view v(env);
      if (v == "openblas") {
        p = SgemmPath::OpenBlas;
      } else if (v == "onednn" && sgemm_onednn_usable()) {
        p = SgemmPath::OneDnn;
      } else if (v == "bysize" && sgemm_onednn_usable()) {
        p = SgemmPath::BySize;
      } else {
        std::fprintf(stderr,
                     "adjoint: ADJOINT_SGEMM=%s ignored (openblas, or onednn or bysize in a build "
                     "with oneDNN)\n",
                     env);
      }
    }
    return p;
  }();
  return path;
}

}  // namespace

std::string openblas_core_advice(std::string_view core, bool cpu_has_avx2, bool cpu_has_avx512,
                                 bool cpu_has_avx512_bf16) {
  if (!is_old_core(core) || !cpu_has_avx2) return "";
  // The newest of OpenBLAS 0.3.21's kernel sets that the CPU runs.
  const char* fit = cpu_has_avx512_bf16 ? "Cooperlake" : cpu_has_avx512 ? "SkylakeX" : "Haswell";
  return "adjoint: OpenBLAS chose its " + std::string(core) +
         " kernels on a CPU with AVX2 (a CPU newer than this OpenBLAS). float32 products run on "
         "oneDNN instead, but float64 products and LAPACK stay slow: set OPENBLAS_CORETYPE=" +
         fit + " before the program starts.\n";
}

void warn_if_openblas_core_is_old() {
  static const bool once = [] {
    const char* core = openblas_get_corename();
    const detail::CpuFeatures& cpu = detail::cpu_features();
    const std::string advice =
        openblas_core_advice(core ? core : "", cpu.avx2, cpu.avx512, cpu.avx512_bf16);
    if (!advice.empty()) std::fputs(advice.c_str(), stderr);
    return true;
  }();
  (void)once;
}

SgemmPath choose_sgemm_path(std::string_view core, bool cpu_has_avx2, bool cpu_has_avx512,
                            bool onednn_usable) {
  if (!onednn_usable) return SgemmPath::OpenBlas;
  if (is_old_core(core)) return cpu_has_avx2 ? SgemmPath::OneDnn : SgemmPath::OpenBlas;
  return cpu_has_avx512 ? SgemmPath::BySize : SgemmPath::OpenBlas;
}

bool by_size_takes_onednn(int64_t m, int64_t n, int64_t k) {
  return m >= 64 && n >= 32 && static_cast<double>(m) * n * k >= 1048576.0;
}

bool sgemm_onednn_usable() {
#ifdef ADJOINT_HAVE_ONEDNN
  return true;
#else
  return false;
#endif
}

SgemmPath sgemm_path() {
  const int forced = forced_path.load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<SgemmPath>(forced) : default_path();
}

std::string sgemm_path_name() {
  const char* core = openblas_get_corename();
  const std::string openblas = core ? core : "unknown";
#ifdef ADJOINT_HAVE_ONEDNN
  if (sgemm_path() == SgemmPath::OneDnn)
    return std::string("onednn:") + onednn_isa_name() + " (OpenBLAS core " + openblas + ")";
  if (sgemm_path() == SgemmPath::BySize)
    return "openblas:" + openblas + ", onednn:" + onednn_isa_name() + " for large products";
#endif
  return "openblas:" + openblas;
}

SgemmPath set_sgemm_path(SgemmPath path) {
  ADJOINT_CHECK(path == SgemmPath::OpenBlas || sgemm_onednn_usable(), Value, "matmul",
                "the oneDNN float32 paths need a build with oneDNN");
  const int prev = forced_path.exchange(static_cast<int>(path), std::memory_order_relaxed);
  return prev >= 0 ? static_cast<SgemmPath>(prev) : default_path();
}

namespace {

// The product on oneDNN (when `onednn` and the build has it) or on OpenBLAS.
void sgemm_on(bool onednn, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
              int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
#ifdef ADJOINT_HAVE_ONEDNN
  if (onednn) {
    onednn_isa();  // the ISA cap before oneDNN's first JIT
    onednn_one_thread_here();
    const dnnl_status_t status =
        dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    ADJOINT_CHECK(status == dnnl_success, Value, "matmul", "oneDNN's sgemm failed (status ",
                  static_cast<int>(status), ") for m=", m, " n=", n, " k=", k);
    return;
  }
#else
  (void)onednn;
#endif
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n,
              k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const SgemmPath path = sgemm_path();
  sgemm_on(
      path == SgemmPath::OneDnn || (path == SgemmPath::BySize && by_size_takes_onednn(m, n, k)), ta,
      tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void sgemm_block(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  sgemm_on(sgemm_path() != SgemmPath::OpenBlas, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace adjoint::kernels

namespace adjoint {

std::string float32_matmul_backend() { return kernels::sgemm_path_name(); }

}  // namespace adjoint
