// The 16-bit products of gemm16.h: the choice of path per dtype, the split of large products over
// adjoint's pool, and the tensor-level kernels that run on oneDNN (gemm_bf16.cpp) or the packed
// kernel (gemm_packed16.cpp). The Widened path is gemm.cpp's.
#include "backend/cpu/gemm16.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>

#include "adjoint/error.h"
#include "adjoint/mixed_precision.h"
#include "adjoint/threading.h"
#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/gemm_layout.h"
#include "backend/cpu/gemm_packed16.h"
#include "core/cpu_features.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

// Note [Choosing a 16-bit product's path]
// bfloat16: oneDNN where the CPU multiplies bfloat16 natively (Note [bfloat16 matmul]). Without
// that, and for float16 (no x86 CPU of ours multiplies it), the packed kernel where the CPU has
// AVX2 but not AVX-512 (Zen 3; Note [Packed 16-bit products]); with AVX-512 the widened copies
// and sgemm's 512-bit kernels (Note [Reduced-precision matmul]). The choice reads the capped CPU
// features only, so it is the same for every product of a run. ADJOINT_GEMM16=onednn|packed|sgemm
// overrides it (for measuring; a path the CPU cannot run is ignored).
constexpr double kSplitFlops = 2.0 * 64 * 64 * 64;  // below this one thread is faster

// A forced path per dtype (bfloat16, float16), -1 when none.
std::atomic<int> forced_path[2] = {-1, -1};

std::atomic<int>& forced_for(DType dtype) {
  ADJOINT_ASSERT(dtype == DType::BFloat16 || dtype == DType::Float16);
  return forced_path[dtype == DType::Float16 ? 1 : 0];
}

Gemm16Path rule(DType dtype) {
  if (dtype == DType::BFloat16 && bf16_gemm_onednn_usable()) return Gemm16Path::OneDnn;
  if (gemm_packed16_supported() && !detail::cpu_features().avx512) return Gemm16Path::Packed;
  return Gemm16Path::Widened;
}

// ADJOINT_GEMM16=onednn|packed|sgemm, read once: a path for both dtypes where it can run them
// (oneDNN runs bfloat16 only), -1 when unset or unusable here.
int path_from_environment(DType dtype) {
  static const char* const env = std::getenv("ADJOINT_GEMM16");
  if (env == nullptr || *env == 0) return -1;
  const std::string_view v(env);
  const Gemm16Path p = v == "onednn"   ? Gemm16Path::OneDnn
                       : v == "packed" ? Gemm16Path::Packed
                                       : Gemm16Path::Widened;
  static std::once_flag warned;
  if (v != "onednn" && v != "packed" && v != "sgemm") {
    std::call_once(warned, [&] {
      std::fprintf(stderr, "adjoint: ADJOINT_GEMM16=%s ignored (onednn, packed or sgemm)\n", env);
    });
    return -1;
  }
  return gemm16_path_usable(dtype, p) ? static_cast<int>(p) : -1;
}

Gemm16Path default_path(DType dtype) {
  static const int from_env[2] = {path_from_environment(DType::BFloat16),
                                  path_from_environment(DType::Float16)};
  const int env = from_env[dtype == DType::Float16 ? 1 : 0];
  return env >= 0 ? static_cast<Gemm16Path>(env) : rule(dtype);
}

}  // namespace

bool gemm16_path_usable(DType dtype, Gemm16Path path) {
  switch (path) {
    case Gemm16Path::OneDnn:
      return dtype == DType::BFloat16 && bf16_gemm_onednn_usable();
    case Gemm16Path::Packed:
      return gemm_packed16_supported();
    case Gemm16Path::Widened:
      return true;
  }
  return false;
}

Gemm16Path gemm16_path(DType dtype) {
  const int forced = forced_for(dtype).load(std::memory_order_relaxed);
  return forced >= 0 ? static_cast<Gemm16Path>(forced) : default_path(dtype);
}

std::string gemm16_path_name(DType dtype) {
  switch (gemm16_path(dtype)) {
    case Gemm16Path::OneDnn:
      return bf16_gemm_onednn_name();
    case Gemm16Path::Packed:
      return "packed:avx2";
    case Gemm16Path::Widened:
      break;
  }
  return "sgemm";
}

Gemm16Path set_gemm16_path(DType dtype, Gemm16Path path) {
  ADJOINT_CHECK(
      gemm16_path_usable(dtype, path), Value, "matmul",
      std::string("the ") + (path == Gemm16Path::OneDnn ? "oneDNN" : "packed") + " path for " +
          std::string(to_string(dtype)) + " products needs " +
          (path == Gemm16Path::OneDnn ? "bfloat16, oneDNN and a CPU with AVX512-BF16 or AMX"
                                      : "a CPU with AVX2, FMA and F16C"));
  const int prev = forced_for(dtype).exchange(static_cast<int>(path), std::memory_order_relaxed);
  return prev >= 0 ? static_cast<Gemm16Path>(prev) : default_path(dtype);
}

template <class H>
void gemm16_single(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const H* a, int64_t lda,
                   const H* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.0f : c[i * ldc + j];
    return;
  }
  const Gemm16Path path = gemm16_path(dtype_of_v<H>);
  if constexpr (std::is_same_v<H, BFloat16>) {
    if (path == Gemm16Path::OneDnn)
      return gemm_bf16_onednn(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  }
  ADJOINT_ASSERT(path == Gemm16Path::Packed, "16-bit gemm on the widened path");
  gemm_packed16(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

// Runs piece(r0, r1, c0, c1) over blocks of C's m x n: all of it on the calling thread when the
// product is small, else row blocks, or column blocks when C is wide and short (as gemm_split in
// gemm.cpp), one per pool thread.
template <class Piece>
void split_product(int64_t m, int64_t n, int64_t k, Piece&& piece) {
  const int threads = get_num_threads();
  if (threads <= 1 || 2.0 * m * n * k < kSplitFlops * threads) return piece(0, m, 0, n);
  if (m >= n || m >= 128 * threads) {
    parallel_for(m, 16, [&](int64_t r0, int64_t r1) { piece(r0, r1, 0, n); });
  } else {
    parallel_for(n, 16, [&](int64_t c0, int64_t c1) { piece(0, m, c0, c1); });
  }
}

template <class H>
void gemm16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const H* a, int64_t lda, const H* b,
            int64_t ldb, float beta, float* c, int64_t ldc) {
  split_product(m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    const H* ap = ta ? a + r0 : a + r0 * lda;
    const H* bp = tb ? b + c0 * ldb : b + c0;
    gemm16_single(ta, tb, r1 - r0, c1 - c0, k, ap, lda, bp, ldb, beta, c + r0 * ldc + c0, ldc);
  });
}

template void gemm16_single<BFloat16>(bool, bool, int64_t, int64_t, int64_t, const BFloat16*,
                                      int64_t, const BFloat16*, int64_t, float, float*, int64_t);
template void gemm16_single<Half>(bool, bool, int64_t, int64_t, int64_t, const Half*, int64_t,
                                  const Half*, int64_t, float, float*, int64_t);
template void gemm16<BFloat16>(bool, bool, int64_t, int64_t, int64_t, const BFloat16*, int64_t,
                               const BFloat16*, int64_t, float, float*, int64_t);
template void gemm16<Half>(bool, bool, int64_t, int64_t, int64_t, const Half*, int64_t, const Half*,
                           int64_t, float, float*, int64_t);

Tensor matmul16(const Tensor& a, const Tensor& b) {
  return cast(matmul16_unrounded(a, b), a.dtype());
}

Tensor matmul16_unrounded(const Tensor& a_in, const Tensor& b_in) {
  const int64_t nd = a_in.dim();
  const int64_t m = a_in.shape()[nd - 2], k = a_in.shape()[nd - 1], n = b_in.shape()[nd - 1];
  Shape out_shape = a_in.shape();
  out_shape[nd - 1] = n;
  Tensor out = make_empty(out_shape, DType::Float32);
  if (out.numel() == 0) return out;
  Tensor a = a_in, b = b_in;
  const MatrixArg la = blas_operand(a, m, k), lb = blas_operand(b, k, n);
  const bool ta = la.trans == CblasTrans, tb = lb.trans == CblasTrans;
  float* cp = out.data_ptr<float>();
  const int64_t batch = out.numel() / (m * n);
  dispatch_reduced_floating(a.dtype(), "matmul", [&]<class H>() {
    const H* ap = a.data_ptr<H>();
    const H* bp = b.data_ptr<H>();
    if (batch == 1) return gemm16(ta, tb, m, n, k, ap, la.ld, bp, lb.ld, 0.0f, cp, n);
    // Whole products of the batch per pool thread, each on one thread.
    const int64_t grain =
        std::max<int64_t>(1, static_cast<int64_t>(kSplitFlops / std::max(2.0 * m * n * k, 1.0)));
    parallel_for(batch, grain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        int64_t ao = 0, bo = 0, rem = i;
        for (int64_t d = nd - 3; d >= 0; --d) {
          const int64_t idx = rem % out_shape[d];
          rem /= out_shape[d];
          ao += idx * a.strides()[d];
          bo += idx * b.strides()[d];
        }
        gemm16_single(ta, tb, m, n, k, ap + ao, la.ld, bp + bo, lb.ld, 0.0f, cp + i * m * n, n);
      }
    });
  });
  return out;
}

Tensor linear16(const Tensor& x_in, const Tensor& w_in, const Tensor& bias) {
  const int64_t rows = x_in.shape()[0], in = x_in.shape()[1], outf = w_in.shape()[0];
  Tensor out = make_empty({rows, outf}, DType::Float32);
  if (bias.defined()) {
    copy_into(out, bias);  // broadcast over the rows, widened: the product adds to it (beta 1)
  } else {
    fill(out, 0.0);
  }
  if (out.numel() == 0 || in == 0) return cast(out, x_in.dtype());
  Tensor x = x_in, w = w_in;
  const MatrixArg lx = blas_operand(x, rows, in), lw = blas_operand(w, outf, in);
  dispatch_reduced_floating(x.dtype(), "linear", [&]<class H>() {
    // Wᵀ: flip W's transpose flag.
    gemm16(lx.trans == CblasTrans, lw.trans != CblasTrans, rows, outf, in, x.data_ptr<H>(), lx.ld,
           w.data_ptr<H>(), lw.ld, 1.0f, out.data_ptr<float>(), outf);
  });
  return cast(out, x_in.dtype());
}

void matmul_add_rounded_into16(const Tensor& c, const Tensor& a_in, const Tensor& b_in) {
  const int64_t m = a_in.shape()[0], k = a_in.shape()[1], n = b_in.shape()[1];
  ADJOINT_ASSERT(c.dtype() == DType::Float32 && c.is_contiguous() &&
                 gemm16_path(a_in.dtype()) == Gemm16Path::Packed && k > 0 &&
                 k <= kPackedAddRoundedMaxK);
  Tensor a = a_in, b = b_in;
  const MatrixArg la = blas_operand(a, m, k), lb = blas_operand(b, k, n);
  const bool ta = la.trans == CblasTrans, tb = lb.trans == CblasTrans;
  float* cp = c.data_ptr<float>();
  dispatch_reduced_floating(a.dtype(), "matmul", [&]<class H>() {
    const H* ap = a.data_ptr<H>();
    const H* bp = b.data_ptr<H>();
    split_product(m, n, k, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      gemm_packed16_add_rounded(ta, tb, r1 - r0, c1 - c0, k, ta ? ap + r0 : ap + r0 * la.ld, la.ld,
                                tb ? bp + c0 * lb.ld : bp + c0, lb.ld, cp + r0 * n + c0, n);
    });
  });
}

void matmul_add_into16(const Tensor& c, const Tensor& a_in, const Tensor& b_in) {
  const int64_t m = a_in.shape()[0], k = a_in.shape()[1], n = b_in.shape()[1];
  if (c.numel() == 0 || k == 0) return;
  Tensor wide = cast(c, DType::Float32);
  Tensor a = a_in, b = b_in;
  const MatrixArg la = blas_operand(a, m, k), lb = blas_operand(b, k, n);
  dispatch_reduced_floating(a.dtype(), "matmul", [&]<class H>() {
    gemm16(la.trans == CblasTrans, lb.trans == CblasTrans, m, n, k, a.data_ptr<H>(), la.ld,
           b.data_ptr<H>(), lb.ld, 1.0f, wide.data_ptr<float>(), n);
  });
  copy_into(c, wide);
}

}  // namespace adjoint::kernels

namespace adjoint {

std::string bf16_matmul_backend() { return kernels::gemm16_path_name(DType::BFloat16); }
std::string float16_matmul_backend() { return kernels::gemm16_path_name(DType::Float16); }

}  // namespace adjoint
