// The bfloat16 products of gemm_bf16.h on oneDNN's matmul primitive (Debian's libdnnl 2.6). The
// other paths (the packed kernel, widened copies and sgemm) are gemm16.cpp's and gemm.cpp's.
#include "backend/cpu/gemm_bf16.h"

#include <map>
#include <string>
#include <tuple>

#include "adjoint/error.h"
#include "backend/cpu/onednn_cpu.h"

namespace adjoint::kernels {
namespace {

// Note [bfloat16 matmul]
// Debian's OpenBLAS 0.3.21 is built without sbgemm, so bfloat16 products go through oneDNN's
// matmul primitive (bfloat16 inputs, float32 accumulation and output) where oneDNN reports an
// ISA that multiplies bfloat16 natively: AVX512-BF16 (vdpbf16ps, Zen 4 and Cooper Lake on) or
// AMX (Sapphire Rapids on). With AVX-512 but no BF16, oneDNN emulates bfloat16 at about a
// quarter of sgemm's speed, and with AVX2 only it has no bfloat16 matmul at all; there the
// packed kernel (Note [Packed 16-bit products]) or widened copies and sgemm run (Note [Choosing a
// 16-bit product's path]). docs/mixed-precision.md has the measurements behind this choice.
// Threading follows Note [Gemm threading]: gemm16.cpp cuts large products into row or column
// blocks of C over adjoint's pool and each block runs here on one thread (oneDNN's OpenMP team
// is limited to one thread in the calling thread), so the blocks, and the results, do not depend
// on timing. The paths sum in different orders, so their results agree to float32 rounding, not
// bit for bit.

#ifdef ADJOINT_HAVE_ONEDNN
bool onednn_isa_has_bf16() {
  const dnnl::cpu_isa isa = onednn_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

// One primitive per product shape, layout and beta, kept per thread: creating one costs tens of
// microseconds (oneDNN's own cache still hashes the whole descriptor). Its three memory objects
// are kept with it and pointed at each call's data: the fused attention kernel makes many
// small products of a few shapes, where building them anew each call showed.
using PrimitiveKey =
    std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, bool>;

void gemm_onednn(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
                 const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  using dt = dnnl::memory::data_type;
  using dims = dnnl::memory::dims;
  onednn_one_thread_here();
  thread_local dnnl::stream stream(onednn_engine());
  struct Cached {
    dnnl::matmul primitive;
    dnnl::memory a, b, c;
  };
  thread_local std::map<PrimitiveKey, Cached> cache;
  const PrimitiveKey key{m, n, k, lda, ldb, ldc, ta, tb, beta != 0};
  auto it = cache.find(key);
  if (it == cache.end()) {
    const dnnl::memory::desc a_md(dims{m, k}, dt::bf16, ta ? dims{1, lda} : dims{lda, 1});
    const dnnl::memory::desc b_md(dims{k, n}, dt::bf16, tb ? dims{1, ldb} : dims{ldb, 1});
    const dnnl::memory::desc c_md(dims{m, n}, dt::f32, dims{ldc, 1});
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
    it = cache
             .emplace(key, Cached{dnnl::matmul(pd),
                                  dnnl::memory(a_md, onednn_engine(), DNNL_MEMORY_NONE),
                                  dnnl::memory(b_md, onednn_engine(), DNNL_MEMORY_NONE),
                                  dnnl::memory(c_md, onednn_engine(), DNNL_MEMORY_NONE)})
             .first;
  }
  Cached& p = it->second;
  p.a.set_data_handle(const_cast<BFloat16*>(a));
  p.b.set_data_handle(const_cast<BFloat16*>(b));
  p.c.set_data_handle(c);
  p.primitive.execute(stream, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
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

std::string bf16_gemm_onednn_name() {
#ifdef ADJOINT_HAVE_ONEDNN
  return std::string("onednn:") + onednn_isa_name();
#else
  return "onednn:unavailable";
#endif
}

void gemm_bf16_onednn(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const BFloat16* a,
                      int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c,
                      int64_t ldc) {
#ifdef ADJOINT_HAVE_ONEDNN
  if (bf16_gemm_onednn_usable()) return gemm_onednn(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
#else
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)a, (void)lda, (void)b, (void)ldb, (void)beta,
      (void)c, (void)ldc;
#endif
  ADJOINT_ASSERT(false, "the oneDNN bfloat16 gemm is not available here");
}

}  // namespace adjoint::kernels
