// Matrix products through OpenBLAS, and float32 ones through sgemm.h, which sends them to oneDNN
// where that is faster or OpenBLAS's kernels are older than the CPU (Notes [OpenBLAS's core] and
// [float32 products by size] in sgemm.cpp). A 2-d operand whose rows or columns are contiguous
// is passed as is, with the transpose flag and leading dimension read off its strides, so
// transposed views (Wᵀ in linear, the transposes in matmul's VJP) cost no copy. Large products
// are split over adjoint's thread pool, each piece on one thread (see Note [Gemm threading]).
#include <cblas.h>

#include <algorithm>

#include "adjoint/error.h"
#include "adjoint/threading.h"
#include "backend/cpu/elementwise_reduced.h"
#include "backend/cpu/gemm16.h"
#include "backend/cpu/gemm_layout.h"
#include "backend/cpu/gemm_packed16.h"
#include "backend/cpu/opmath.h"
#include "backend/cpu/sgemm.h"
#include "backend/cpu/single_threaded_blas.h"
#include "backend/cpu/wrapping.h"
#include "backend/device_kernels.h"
#include "backend/kernels.h"
#include "core/dispatch.h"
#include "core/parallel.h"
#include "core/tensor_factory.h"

namespace adjoint::kernels {
namespace {

// Note [Gemm threading]
// OpenBLAS threads a product itself, but its worker threads spin (sched_yield) for a while
// after every threaded call, and on a 2-core machine that spinning takes the core the next
// elementwise kernel wants; each small product also pays OpenBLAS's start and join. So a
// product big enough to split is cut here instead, into one piece per pool thread: whole
// products of a batch, or else row (or column) blocks of C, and every piece runs on
// single-threaded OpenBLAS (or oneDNN, Note [float32 products by size]). adjoint's pool is the
// same threads the elementwise kernels use, and it spins for at most 2 ms between jobs (Note
// [Pool waiting]). The pieces are fixed by the thread count, never by timing, and each element
// of C is computed by one single-threaded gemm, so results do not depend on scheduling.
// OpenBLAS's thread count (set_num_threads sets it with the pool's) still caps how many pieces
// run at once.
// Note [Reduced-precision matmul]
// bfloat16 products run on oneDNN where the CPU multiplies bfloat16 (Note [bfloat16 matmul]), and
// 16-bit products on AVX2 CPUs without AVX-512 on the packed kernel, which widens blocks of the
// operands while packing them (Note [Packed 16-bit products]); gemm16.h has both. Elsewhere the
// operands are converted to float32 copies and sgemm runs, rounding the float32 result once
// (Note [Reduced-precision kernels]). No x86 CPU of ours multiplies float16 natively, so the win
// of float16 is memory.
constexpr double kSplitFlops = 2.0 * 64 * 64 * 64;  // below this one thread is faster
// Note [Widened products added in tiles]
// On the sgemm path, and on the packed one when k is longer than the kernel's block (shorter
// products round and add in its store), c += widen(round16(a b)) (a weight gradient through
// autocast's cast) runs a tile of c at a time (the packed kernel reads the 16-bit operands, sgemm
// widened copies): the tile's float32 product lands in a buffer that stays in cache, and is
// rounded and added into c from there, so the full float32 product is never written out and
// read back. The tile is zeroed here and the product added with beta = 1: OpenBLAS's own
// beta = 0 clearing is a slow pass (on Zen 3's kernels a [1024, 128] x [128, 1024] product took
// 2.75 ms with it against 2.49 ms with beta = 1; zeroing a tile costs a few microseconds). Tiles
// of whole rows read c in long runs, which the hardware prefetcher follows; of the shapes tried
// on the mlp benchmark's weight gradients (32 to 512 rows by 256 to 1024 columns), 256 rows of up
// to 1024 columns was fastest, with fewer rows where that gives every thread a tile. Against
// the float32 beta = 1 product (Zen 3 emulation) it takes 1.05-1.10x at gpt-tiny's shapes
// (k = 2048), 1.18x at the mlp's and 1.45x at a 512 x 512, k = 64; writing the whole product
// and adding it in a second pass took 1.33-2.2x. The rest is the add's pass over c, which
// sgemm's beta = 1 overlaps with its arithmetic. Each element is still one sgemm over the whole
// k, so the bits are those of the whole product.
constexpr int64_t kTileRows = 256, kTileCols = 1024;  // at most 1 MiB of float32

template <class T>
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    sgemm(ta == CblasTrans, tb == CblasTrans, m, n, k, a, lda, b, ldb, beta, c, ldc);
  } else if constexpr (std::is_same_v<T, double>) {
    warn_if_openblas_core_is_old();  // float64 stays on OpenBLAS (Note [OpenBLAS's core])
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
  } else {
    // Integer matmul: a plain triple loop (no BLAS for int64), wrapping on overflow as the
    // elementwise integer ops do (src/backend/cpu/wrapping.h).
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        T acc = beta == T(0) ? T(0) : c[i * ldc + j];
        for (int64_t p = 0; p < k; ++p) {
          T av = ta == CblasNoTrans ? a[i * lda + p] : a[p * lda + i];
          T bv = tb == CblasNoTrans ? b[p * ldb + j] : b[j * ldb + p];
          acc = add_wrap(acc, mul_wrap(av, bv));
        }
        c[i * ldc + j] = acc;
      }
  }
}

// C = A B (+ beta C) for one product, split over the pool by rows of C (or by columns when C
// has few rows) when it is large enough. A is m x k, B is k x n, as gemm<T> takes them.
template <class T>
void gemm_split(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n, int64_t k, const T* a,
                int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (!std::is_floating_point_v<T>) {
    return gemm<T>(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  } else {
    // OpenBLAS's own thread count still caps the split (openblas_set_num_threads(1) keeps
    // products on one thread).
    const int threads = std::min(get_num_threads(), openblas_get_num_threads());
    if (threads <= 1 || 2.0 * m * n * k < kSplitFlops * threads) {
      SingleThreadedBlas one;
      return gemm<T>(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    }
    SingleThreadedBlas one;
    // Each row piece packs all of B and each column piece all of A, so split the longer side
    // of C, except that row pieces of 128 rows or more keep OpenBLAS's row blocking full (on
    // the mlp benchmark's 128-row products, column pieces made the forward ~4 % faster).
    if (m >= n || m >= 128 * threads) {
      parallel_for(m, 16, [&](int64_t r0, int64_t r1) {
        const T* ap = ta == CblasNoTrans ? a + r0 * lda : a + r0;
        gemm<T>(ta, tb, r1 - r0, n, k, ap, lda, b, ldb, beta, c + r0 * ldc, ldc);
      });
    } else {
      parallel_for(n, 16, [&](int64_t c0, int64_t c1) {
        const T* bp = tb == CblasNoTrans ? b + c0 : b + c0 * ldb;
        gemm<T>(ta, tb, m, c1 - c0, k, a, lda, bp, ldb, beta, c + c0, ldc);
      });
    }
  }
}

// A 16-bit product that reads its operands as they are (oneDNN or the packed kernel, gemm16.h);
// the others widen their operands and run sgemm.
bool direct16(const Tensor& t) {
  return is_reduced_floating(t) && gemm16_path(t.dtype()) != Gemm16Path::Widened;
}

}  // namespace

Tensor cpu::matmul(const Tensor& a_in, const Tensor& b_in) {
  ADJOINT_ASSERT(a_in.dim() >= 2 && a_in.dim() == b_in.dim() && a_in.dtype() == b_in.dtype());
  if (is_reduced_floating(a_in)) {  // See Note [Reduced-precision matmul]
    if (direct16(a_in)) return matmul16(a_in, b_in);
    return narrow_to(matmul(widen_operand(a_in), widen_operand(b_in)), a_in.dtype());
  }
  const int64_t nd = a_in.dim();
  const int64_t m = a_in.shape()[nd - 2], k = a_in.shape()[nd - 1], n = b_in.shape()[nd - 1];
  Shape out_shape = a_in.shape();
  out_shape[nd - 1] = n;
  Tensor out = make_empty(out_shape, a_in.dtype());
  if (out.numel() == 0) return out;
  Tensor a = a_in, b = b_in;
  const MatrixArg la = blas_operand(a, m, k), lb = blas_operand(b, k, n);
  const int64_t batch = out.numel() / (m * n);
  dispatch_opmath_numeric(a.dtype(), "matmul", [&]<class T>() {
    const T* ap = a.data_ptr<T>();
    const T* bp = b.data_ptr<T>();
    T* cp = out.data_ptr<T>();
    if (k == 0) {
      std::fill(cp, cp + batch * m * n, T(0));
      return;
    }
    if (batch == 1) {
      gemm_split<T>(la.trans, lb.trans, m, n, k, ap, la.ld, bp, lb.ld, T(0), cp, n);
      return;
    }
    // Products [begin, end) of the batch, each single-threaded.
    auto run = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        // Batch offsets of operand i, following each operand's own (maybe zero) batch strides.
        int64_t ao = 0, bo = 0, rem = i;
        for (int64_t d = nd - 3; d >= 0; --d) {
          int64_t idx = rem % out_shape[d];
          rem /= out_shape[d];
          ao += idx * a.strides()[d];
          bo += idx * b.strides()[d];
        }
        gemm<T>(la.trans, lb.trans, m, n, k, ap + ao, la.ld, bp + bo, lb.ld, T(0), cp + i * m * n,
                n);
      }
    };
    if constexpr (std::is_floating_point_v<T>) {
      const bool split = std::min(get_num_threads(), openblas_get_num_threads()) > 1;
      SingleThreadedBlas one;
      // One product per grain unless they are tiny (see Note [Gemm threading]).
      const int64_t grain =
          std::max<int64_t>(1, static_cast<int64_t>(kSplitFlops / std::max(2.0 * m * n * k, 1.0)));
      if (split) {
        parallel_for(batch, grain, run);
      } else {
        run(0, batch);
      }
    } else {
      run(0, batch);
    }
  });
  return out;
}

void cpu::matmul_add_into(const Tensor& c, const Tensor& a_in, const Tensor& b_in) {
  ADJOINT_ASSERT(a_in.dim() == 2 && b_in.dim() == 2 && c.dim() == 2 && c.is_contiguous() &&
                 a_in.dtype() == c.dtype() && b_in.dtype() == c.dtype());
  if (direct16(c)) return matmul_add_into16(c, a_in, b_in);
  if (is_reduced_floating(c)) {  // See Note [Reduced-precision matmul]
    Tensor wide = widen(c);
    matmul_add_into(wide, widen_operand(a_in), widen_operand(b_in));
    copy_into(c, wide);
    return;
  }
  const int64_t m = a_in.shape()[0], k = a_in.shape()[1], n = b_in.shape()[1];
  ADJOINT_ASSERT(b_in.shape()[0] == k && c.shape()[0] == m && c.shape()[1] == n);
  if (c.numel() == 0 || k == 0) return;
  Tensor a = a_in, b = b_in;
  const MatrixArg la = blas_operand(a, m, k), lb = blas_operand(b, k, n);
  dispatch_opmath_numeric(c.dtype(), "matmul", [&]<class T>() {
    gemm_split<T>(la.trans, lb.trans, m, n, k, a.data_ptr<T>(), la.ld, b.data_ptr<T>(), lb.ld, T(1),
                  c.data_ptr<T>(), n);
  });
}

void cpu::matmul_widened_add_into(const Tensor& c, const Tensor& a_in, const Tensor& b_in) {
  ADJOINT_ASSERT(c.dtype() == DType::Float32 && is_reduced_floating(a_in) &&
                 b_in.dtype() == a_in.dtype());
  // The float32 product that matmul(a, b) rounds to 16 bits, on its path; rounded here in the
  // add's pass instead of in a pass of its own.
  const Gemm16Path path = gemm16_path(a_in.dtype());
  if (path == Gemm16Path::OneDnn)
    return add_widened_into(c, matmul16_unrounded(a_in, b_in), a_in.dtype());
  const int64_t m = a_in.shape()[0], k = a_in.shape()[1], n = b_in.shape()[1];
  if (c.numel() == 0 || k == 0) return;  // a zero product adds nothing
  // The packed kernel reads the 16-bit operands, and rounds and adds in its store when each sum
  // is complete in registers (k within its block); sgemm needs float32 copies.
  const bool packed = path == Gemm16Path::Packed;
  if (packed && k <= kPackedAddRoundedMaxK) return matmul_add_rounded_into16(c, a_in, b_in);
  Tensor a = packed ? a_in : widen_operand(a_in), b = packed ? b_in : widen_operand(b_in);
  const MatrixArg la = blas_operand(a, m, k), lb = blas_operand(b, k, n);
  float* cp = c.data_ptr<float>();
  // Fewer rows per tile where that gives every thread one (a 256-row weight otherwise ran on one).
  const int64_t threads = std::max(1, get_num_threads());
  const int64_t tile_rows = std::min(kTileRows, std::max<int64_t>(16, (m + threads - 1) / threads));
  const int64_t row_tiles = (m + tile_rows - 1) / tile_rows;
  const int64_t col_tiles = (n + kTileCols - 1) / kTileCols;
  SingleThreadedBlas one;
  dispatch_reduced_floating(a_in.dtype(), "matmul", [&]<class H>() {
    // A rows x cols tile of the product, from row r0 and column c0, into `tile`.
    auto tile_product = [&](int64_t r0, int64_t c0, int64_t rows, int64_t cols, float* tile) {
      const bool ta = la.trans == CblasTrans, tb = lb.trans == CblasTrans;
      const int64_t ao = ta ? r0 : r0 * la.ld, bo = tb ? c0 * lb.ld : c0;
      if (packed) {
        gemm16_single<H>(ta, tb, rows, cols, k, a.data_ptr<H>() + ao, la.ld, b.data_ptr<H>() + bo,
                         lb.ld, 0.0f, tile, cols);
      } else {
        std::fill(tile, tile + rows * cols, 0.0f);
        gemm<float>(la.trans, lb.trans, rows, cols, k, a.data_ptr<float>() + ao, la.ld,
                    b.data_ptr<float>() + bo, lb.ld, 1.0f, tile, cols);
      }
    };
    // Note [Widened products added in tiles]
    parallel_for(row_tiles * col_tiles, 1, [&](int64_t t0, int64_t t1) {
      Tensor buffer = make_empty({std::min(m, tile_rows) * std::min(n, kTileCols)}, DType::Float32);
      float* tile = buffer.data_ptr<float>();
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t r0 = t / col_tiles * tile_rows, c0 = t % col_tiles * kTileCols;
        const int64_t rows = std::min(tile_rows, m - r0), cols = std::min(kTileCols, n - c0);
        tile_product(r0, c0, rows, cols, tile);
        for (int64_t r = 0; r < rows; ++r)
          add_rounded_into<H>(cp + (r0 + r) * n + c0, tile + r * cols, cols);
      }
    });
  });
}

Tensor cpu::linear(const Tensor& x_in, const Tensor& w_in, const Tensor& bias) {
  if (direct16(x_in)) return linear16(x_in, w_in, bias);
  if (is_reduced_floating(x_in))  // See Note [Reduced-precision matmul]
    return narrow_to(linear(widen_operand(x_in), widen_operand(w_in), widen(bias)), x_in.dtype());
  const int64_t rows = x_in.shape()[0], in = x_in.shape()[1], outf = w_in.shape()[0];
  Tensor out = make_empty({rows, outf}, x_in.dtype());
  if (out.numel() == 0) return out;
  Tensor x = x_in, w = w_in;
  const MatrixArg lx = blas_operand(x, rows, in), lw = blas_operand(w, outf, in);
  // Wᵀ: flip W's transpose flag.
  CBLAS_TRANSPOSE wt = lw.trans == CblasNoTrans ? CblasTrans : CblasNoTrans;
  dispatch_opmath_numeric(x.dtype(), "linear", [&]<class T>() {
    T* o = out.data_ptr<T>();
    T beta = T(0);
    if (bias.defined()) {
      Tensor bc = bias.is_contiguous() ? bias : cast(bias, bias.dtype());
      const T* bp = bc.data_ptr<T>();
      parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(outf, 1)),
                   [&](int64_t r0, int64_t r1) {
                     for (int64_t r = r0; r < r1; ++r) std::copy(bp, bp + outf, o + r * outf);
                   });
      beta = T(1);
    }
    if (in == 0) {
      if (!bias.defined()) std::fill(o, o + rows * outf, T(0));
      return;
    }
    gemm_split<T>(lx.trans, wt, rows, outf, in, x.data_ptr<T>(), lx.ld, w.data_ptr<T>(), lw.ld,
                  beta, o, outf);
  });
  return out;
}

}  // namespace adjoint::kernels
