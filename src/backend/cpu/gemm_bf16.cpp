// The bfloat16 products of gemm_bf16.h on oneDNN's matmul primitive (Debian's libdnnl 2.6). The
// other path (operands widened to float32, then sgemm) is gemm.cpp's, shared with float16.
#include "backend/cpu/gemm_bf16.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <tuple>
#include <vector>

#include "adjoint/error.h"
#include "adjoint/mixed_precision.h"
#include "adjoint/threading.h"
#include "backend/cpu/gemm_layout.h"
#include "backend/cpu/onednn_cpu.h"
#include "core/half_convert.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

// Note [bfloat16 matmul]
// Debian's OpenBLAS 0.3.21 is built without sbgemm, so bfloat16 products go through oneDNN's
// matmul primitive (bfloat16 inputs, float32 accumulation and output) where oneDNN reports an
// ISA that multiplies bfloat16 natively: AVX512-BF16 (vdpbf16ps, Zen 4 and Cooper Lake on) or
// AMX (Sapphire Rapids on). With AVX-512 but no BF16, oneDNN emulates bfloat16 at about a
// quarter of sgemm's speed, and with AVX2 only it has no bfloat16 matmul at all; there the
// operands are widened to float32 (exactly) and sgemm runs. docs/mixed-precision.md has the
// measurements behind this choice. Threading follows Note [Gemm threading]: large products are
// cut into row or column blocks of C over adjoint's pool and each block runs on one thread
// (oneDNN's OpenMP team is limited to one thread in the calling thread), so the blocks, and
// the results, do not depend on timing. The paths sum in different orders, so their results
// agree to float32 rounding, not bit for bit.
constexpr double kSplitFlops = 2.0 * 64 * 64 * 64;

std::atomic<int> forced_path{-1};

#ifdef ADJOINT_HAVE_ONEDNN
bool onednn_isa_has_bf16() {
  const dnnl::cpu_isa isa = onednn_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

// One primitive per product shape, layout and beta, kept per thread: creating one costs tens of
// microseconds (oneDNN's own cache still hashes the whole descriptor).
using PrimitiveKey =
    std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool>;

void gemm_onednn(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
                 const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  onednn_one_thread_here();
  thread_local dnnl::stream stream(onednn_engine());
  thread_local std::map<PrimitiveKey, dnnl::matmul> cache;
  const dnnl::memory::desc a_md(dims{m, k}, dt::bf16, ta ? dims{1, lda} : dims{lda, 1});
  const dnnl::memory::desc b_md(dims{k, n}, dt::bf16, tb ? dims{1, ldb} : dims{ldb, 1});
  const dnnl::memory::desc c_md(dims{m, n}, dt::f32, dims{ldc, 1});
  const PrimitiveKey key{m, n, k, lda, ldb, ldc, ta, tb, beta != 0};
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= 256) cache.clear();  // bound the memory a shape-changing workload holds
    dnnl::primitive_attr attr;
    if (beta != 0) {
      ADJOINT_ASSERT(beta == 1, "bfloat16 gemm supports beta 0 or 1");
      dnnl::post_ops ops;
      ops.append_sum(1.0f);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr,
                                          onednn_engine());
    it = cache.emplace(key, dnnl::matmul(pd)).first;
  }
  dnnl::memory am(a_md, onednn_engine(), const_cast<BFloat16*>(a));
  dnnl::memory bm(b_md, onednn_engine(), const_cast<BFloat16*>(b));
  dnnl::memory cm(c_md, onednn_engine(), c);
  it->second.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream.wait();
}
#endif

}  // namespace

bool bf16_gemm_onednn_usable() {
#ifdef ADJOINT_HAVE_ONEDNN
  return onednn_isa_has_bf16();
#else
  return false;
#endif
}

Bf16GemmPath bf16_gemm_path() {
  const int forced = forced_path.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<Bf16GemmPath>(forced);
  return bf16_gemm_onednn_usable() ? Bf16GemmPath::OneDnn : Bf16GemmPath::Sgemm;
}

std::string bf16_gemm_path_name() {
#ifdef ADJOINT_HAVE_ONEDNN
  if (bf16_gemm_path() == Bf16GemmPath::OneDnn) return std::string("onednn:") + onednn_isa_name();
#endif
  return "sgemm";
}

Bf16GemmPath set_bf16_gemm_path(Bf16GemmPath path) {
  ADJOINT_CHECK(path != Bf16GemmPath::OneDnn || bf16_gemm_onednn_usable(), Value, "matmul",
                "the oneDNN bfloat16 path needs oneDNN and a CPU with AVX512-BF16 or AMX");
  const Bf16GemmPath prev = bf16_gemm_path();
  forced_path.store(static_cast<int>(path), std::memory_order_relaxed);
  return prev;
}

void gemm_bf16_single(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a,
                      int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c,
                      int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0.0f : c[i * ldc + j];
    return;
  }
#ifdef ADJOINT_HAVE_ONEDNN
  if (bf16_gemm_onednn_usable()) return gemm_onednn(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
#endif
  ADJOINT_ASSERT(false, "the oneDNN bfloat16 gemm is not available here");
}

void gemm_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
               const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const int threads = get_num_threads();
  if (threads <= 1 || 2.0 * m * n * k < kSplitFlops * threads)
    return gemm_bf16_single(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  // Row blocks unless C is wide and short (as gemm_split in gemm.cpp).
  if (m >= n || m >= 128 * threads) {
    parallel_for(m, 16, [&](int64_t r0, int64_t r1) {
      const BFloat16* ap = ta ? a + r0 : a + r0 * lda;
      gemm_bf16_single(ta, tb, r1 - r0, n, k, ap, lda, b, ldb, beta, c + r0 * ldc, ldc);
    });
  } else {
    parallel_for(n, 16, [&](int64_t c0, int64_t c1) {
      const BFloat16* bp = tb ? b + c0 * ldb : b + c0;
      gemm_bf16_single(ta, tb, m, c1 - c0, k, a, lda, bp, ldb, beta, c + c0, ldc);
    });
  }
}

Tensor matmul_bf16(const Tensor& a, const Tensor& b) {
  return cast(matmul_bf16_unrounded(a, b), DType::BFloat16);
}

Tensor matmul_bf16_unrounded(const Tensor& a_in, const Tensor& b_in) {
  const int64_t nd = a_in.dim();
  const int64_t m = a_in.shape()[nd - 2], k = a_in.shape()[nd - 1], n = b_in.shape()[nd - 1];
  Shape out_shape = a_in.shape();
  out_shape[nd - 1] = n;
  Tensor out = make_empty(out_shape, DType::Float32);
  if (out.numel() == 0) return out;
  Tensor a = a_in, b = b_in;
  const MatrixArg la = blas_operand(a, m, k), lb = blas_operand(b, k, n);
  const bool ta = la.trans == CblasTrans, tb = lb.trans == CblasTrans;
  const BFloat16* ap = a.data_ptr<BFloat16>();
  const BFloat16* bp = b.data_ptr<BFloat16>();
  float* cp = out.data_ptr<float>();
  const int64_t batch = out.numel() / (m * n);
  if (batch == 1) {
    gemm_bf16(ta, tb, m, n, k, ap, la.ld, bp, lb.ld, 0.0f, cp, n);
  } else {
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
        gemm_bf16_single(ta, tb, m, n, k, ap + ao, la.ld, bp + bo, lb.ld, 0.0f, cp + i * m * n, n);
      }
    });
  }
  return out;
}

Tensor linear_bf16(const Tensor& x_in, const Tensor& w_in, const Tensor& bias) {
  const int64_t rows = x_in.shape()[0], in = x_in.shape()[1], outf = w_in.shape()[0];
  Tensor out = make_empty({rows, outf}, DType::Float32);
  if (bias.defined()) {
    copy_into(out, bias);  // broadcast over the rows, widened: the product adds to it (beta 1)
  } else {
    fill(out, 0.0);
  }
  if (out.numel() == 0 || in == 0) return cast(out, DType::BFloat16);
  Tensor x = x_in, w = w_in;
  const MatrixArg lx = blas_operand(x, rows, in), lw = blas_operand(w, outf, in);
  // Wᵀ: flip W's transpose flag.
  gemm_bf16(lx.trans == CblasTrans, lw.trans != CblasTrans, rows, outf, in, x.data_ptr<BFloat16>(),
            lx.ld, w.data_ptr<BFloat16>(), lw.ld, 1.0f, out.data_ptr<float>(), outf);
  return cast(out, DType::BFloat16);
}

void matmul_add_into_bf16(const Tensor& c, const Tensor& a_in, const Tensor& b_in) {
  const int64_t m = a_in.shape()[0], k = a_in.shape()[1], n = b_in.shape()[1];
  if (c.numel() == 0 || k == 0) return;
  Tensor wide = cast(c, DType::Float32);
  Tensor a = a_in, b = b_in;
  const MatrixArg la = blas_operand(a, m, k), lb = blas_operand(b, k, n);
  gemm_bf16(la.trans == CblasTrans, lb.trans == CblasTrans, m, n, k, a.data_ptr<BFloat16>(), la.ld,
            b.data_ptr<BFloat16>(), lb.ld, 1.0f, wide.data_ptr<float>(), n);
  copy_into(c, wide);
}

}  // namespace adjoint::kernels

namespace adjoint {

std::string bf16_matmul_backend() { return kernels::bf16_gemm_path_name(); }

}  // namespace adjoint
