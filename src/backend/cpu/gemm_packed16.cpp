// The packed 16-bit product of gemm_packed16.h. Compiled for AVX2, FMA and F16C with target
// attributes (the library is built for baseline x86-64) and only called after a CPUID check.
#include "backend/cpu/gemm_packed16.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "adjoint/error.h"
#include "core/cpu_features.h"

namespace adjoint::kernels {
namespace {

// Note [Packed 16-bit products]
// Where oneDNN cannot multiply bfloat16 (AVX2 CPUs such as Zen 3) and for float16 on CPUs
// without 512-bit vectors, a 16-bit product used to widen both operands to float32 copies and
// run sgemm, which packs those copies again: for an mlp layer's 1024 x 1024 weight that is 2 MiB
// read, 4 MiB written and 4 MiB read back per product, and autocast's bfloat16 step ran 1.2x the
// float32 one (the bound is 1.1x). This kernel is the usual blocked GEMM (Goto and van de
// Geijn's loops: a kc x nc block of B packed once, an mc x kc block of A packed once per B block,
// then a 6 x 16 micro-kernel over the packed panels) whose packing reads the 16-bit operands and
// widens them, exactly, on the way: each operand is read once at half float32's bytes and no
// widened copy is ever written. The micro-kernel keeps 6 x 16 float32 sums in 12 ymm registers
// and adds one rank-1 update per k with 12 FMAs (2 loads of B, 6 broadcasts of A). Each element
// of C is the sum, in order, of one FMA chain per kc block, and the blocks depend on k alone, so
// its bits do not depend on how a product is split over threads or tiles; sgemm sums in its own
// order, so the paths agree to float32 rounding, not bit for bit. AVX2 only: on CPUs with
// 512-bit FMAs (Intel's two ports) sgemm's AVX-512 kernels on widened copies are up to twice as
// fast, so there the widened path stays (gemm16.cpp chooses). docs/mixed-precision.md has the
// measurements.
constexpr int64_t kMr = 6, kNr = 16;            // the micro-kernel's tile of C
constexpr int64_t kKc = kPackedAddRoundedMaxK;  // k per block: a 256 x 16 panel of B, 16 KiB (L1)
constexpr int64_t kMc = 72;                     // rows of A per block: 72 x 256 floats, 72 KiB (L2)
constexpr int64_t kNc = 1024;  // columns of B per block: 1 MiB (L2 on Zen 4, L3 on Zen 3)

#define ADJOINT_PACKED16_TARGET __attribute__((target("avx2,fma,f16c")))

ADJOINT_PACKED16_TARGET inline __m256 load8(const BFloat16* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
ADJOINT_PACKED16_TARGET inline __m256 load8(const Half* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float widen(BFloat16 h) { return detail::bfloat16_bits_to_float(h.bits); }
inline float widen(Half h) { return detail::half_bits_to_float(h.bits); }

// r0..r7 (rows of 8) become their transpose.
ADJOINT_PACKED16_TARGET inline void transpose8(__m256 r[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {
    s[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
    s[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
    s[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
    s[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x20);
    r[i + 4] = _mm256_permute2f128_ps(s[i], s[i + 4], 0x31);
  }
}

// Packs the kc x nc block of B (element (p, j) at b[p * ldb + j], or b[j * ldb + p] when
// trans) into panels of kNr columns, panel by panel: out[j0 * kc + p * kNr + j]. Columns past
// nc are zeros.
template <class H>
ADJOINT_PACKED16_TARGET void pack_b(bool trans, int64_t kc, int64_t nc, const H* b, int64_t ldb,
                                    float* out) {
  for (int64_t j0 = 0; j0 < nc; j0 += kNr) {
    const int64_t nr = std::min(kNr, nc - j0);
    float* dst = out + j0 * kc;
    int64_t p = 0;
    if (nr == kNr && !trans) {
      for (; p < kc; ++p) {
        const H* src = b + p * ldb + j0;
        _mm256_storeu_ps(dst + p * kNr, load8(src));
        _mm256_storeu_ps(dst + p * kNr + 8, load8(src + 8));
      }
    } else if (nr == kNr) {  // columns of B are rows in memory: transpose 8 x 8 blocks
      for (; p + 8 <= kc; p += 8) {
        for (int64_t half = 0; half < 2; ++half) {
          const H* src = b + (j0 + 8 * half) * ldb + p;
          __m256 r[8];
          for (int i = 0; i < 8; ++i) r[i] = load8(src + i * ldb);
          transpose8(r);
          for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (p + i) * kNr + 8 * half, r[i]);
        }
      }
    }
    for (; p < kc; ++p)
      for (int64_t j = 0; j < kNr; ++j)
        dst[p * kNr + j] = j < nr ? widen(trans ? b[(j0 + j) * ldb + p] : b[p * ldb + j0 + j]) : 0;
  }
}

// Packs the mc x kc block of A (element (i, p) at a[i * lda + p], or a[p * lda + i] when trans)
// into panels of kMr rows: out[i0 * kc + p * kMr + i]. Rows past mc are zeros. The vector paths
// store 8 floats per k for 6 wanted, in increasing order, so each store's last 2 are rewritten
// by the next one; the buffer has room for the last panel's 2 extra.
template <class H>
ADJOINT_PACKED16_TARGET void pack_a(bool trans, int64_t mc, int64_t kc, const H* a, int64_t lda,
                                    float* out) {
  for (int64_t i0 = 0; i0 < mc; i0 += kMr) {
    const int64_t mr = std::min(kMr, mc - i0);
    float* dst = out + i0 * kc;
    int64_t p = 0;
    if (mr == kMr && !trans) {  // rows of A are rows in memory: transpose 6 x 8 blocks
      for (; p + 8 <= kc; p += 8) {
        const H* src = a + i0 * lda + p;
        __m256 r[8];
        for (int i = 0; i < 6; ++i) r[i] = load8(src + i * lda);
        r[6] = r[7] = _mm256_setzero_ps();
        transpose8(r);
        for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (p + i) * kMr, r[i]);
      }
    } else if (trans && i0 + 8 <= mc) {  // 8 contiguous rows exist from i0: load them all
      for (; p < kc; ++p) _mm256_storeu_ps(dst + p * kMr, load8(a + p * lda + i0));
    }
    for (; p < kc; ++p)
      for (int64_t i = 0; i < kMr; ++i)
        dst[p * kMr + i] = i < mr ? widen(trans ? a[p * lda + i0 + i] : a[(i0 + i) * lda + p]) : 0;
  }
}

// How the micro-kernel writes its sums into C: c = sum, c += sum, or c += widen(round16(sum))
// (gemm_packed16_add_rounded: the bits that rounding the product to 16 bits and adding it give).
enum class Store { Assign, Accumulate, AddRoundedBf16, AddRoundedHalf };

// sum rounded to the 16-bit type and widened back: the bits of round_through_bfloat16_avx2 and
// round_through_half_f16c in core/half_convert.cpp (and so of the portable code). bfloat16: a
// NaN keeps its top bits and is made quiet (an FMA's NaN already is; the blend matters because
// adding the rounding bias to a NaN's payload could carry into its exponent and sign), anything
// else rounds to nearest even on the low 16 bits (u + 0x7fff + ((u >> 16) & 1)).
ADJOINT_PACKED16_TARGET inline __m256 round_through_bf16(__m256 sum) {
  const __m256i u = _mm256_castps_si256(sum);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
  const __m256i top = _mm256_blendv_epi8(rounded, quiet, nan);
  return _mm256_castsi256_ps(_mm256_and_si256(top, _mm256_set1_epi32(-65536)));
}
ADJOINT_PACKED16_TARGET inline __m256 round_through_half(__m256 sum) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(sum, _MM_FROUND_TO_NEAREST_INT));
}

// What store S writes for sum at c (8 floats).
template <Store S>
ADJOINT_PACKED16_TARGET inline __m256 stored(__m256 sum, const float* c) {
  if constexpr (S == Store::Assign) return sum;
  if constexpr (S == Store::Accumulate) return _mm256_add_ps(_mm256_loadu_ps(c), sum);
  if constexpr (S == Store::AddRoundedBf16)
    return _mm256_add_ps(_mm256_loadu_ps(c), round_through_bf16(sum));
  if constexpr (S == Store::AddRoundedHalf)
    return _mm256_add_ps(_mm256_loadu_ps(c), round_through_half(sum));
}

// C's mr x nr tile (mr <= 6, nr <= 16) gets the kc-long product of a packed 6-row panel of A and
// a packed 16-column panel of B, stored as S says.
template <Store S>
ADJOINT_PACKED16_TARGET void micro_kernel(int64_t kc, const float* a, const float* b, float* c,
                                          int64_t ldc, int64_t mr, int64_t nr) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t p = 0; p < kc; ++p, a += kMr, b += kNr) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    __m256 x = _mm256_broadcast_ss(a);
    c00 = _mm256_fmadd_ps(x, b0, c00);
    c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(x, b0, c10);
    c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(x, b0, c20);
    c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(x, b0, c30);
    c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(x, b0, c40);
    c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(x, b0, c50);
    c51 = _mm256_fmadd_ps(x, b1, c51);
  }
  const __m256 sums[kMr][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                               {c30, c31}, {c40, c41}, {c50, c51}};
  if (mr == kMr && nr == kNr) {
    for (int64_t i = 0; i < kMr; ++i) {
      float* row = c + i * ldc;
      const __m256 lo = stored<S>(sums[i][0], row), hi = stored<S>(sums[i][1], row + 8);
      _mm256_storeu_ps(row, lo);
      _mm256_storeu_ps(row + 8, hi);
    }
    return;
  }
  // An edge tile: through a full-size copy of C's part (zeros elsewhere), then back.
  alignas(32) float tile[kMr * kNr] = {};
  if constexpr (S != Store::Assign)
    for (int64_t i = 0; i < mr; ++i) std::copy(c + i * ldc, c + i * ldc + nr, tile + i * kNr);
  for (int64_t i = 0; i < kMr; ++i) {
    float* row = tile + i * kNr;
    const __m256 lo = stored<S>(sums[i][0], row), hi = stored<S>(sums[i][1], row + 8);
    _mm256_store_ps(row, lo);
    _mm256_store_ps(row + 8, hi);
  }
  for (int64_t i = 0; i < mr; ++i) std::copy(tile + i * kNr, tile + i * kNr + nr, c + i * ldc);
}

// The packing buffers of the calling thread (about 1 MiB for B and 80 KiB for A, kept for the
// thread's life as OpenBLAS keeps its own), 32-byte aligned.
struct PackBuffers {
  std::vector<float> a_store, b_store;
  float* a = nullptr;
  float* b = nullptr;
  PackBuffers() : a_store((kMc + kMr) * kKc + 16), b_store((kNc + kNr) * kKc + 8) {
    a = align(a_store.data());
    b = align(b_store.data());
  }
  static float* align(float* p) {
    const auto bits = reinterpret_cast<std::uintptr_t>(p);
    return reinterpret_cast<float*>((bits + 31) & ~std::uintptr_t{31});
  }
};

// One set per thread, shared by every instantiation of packed_product.
PackBuffers& pack_buffers() {
  thread_local PackBuffers buffers;
  return buffers;
}

// The blocked loops of Note [Packed 16-bit products]; each kc block's sums are stored as
// store(first block?) says.
template <class H, class StoreOf>
void packed_product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const H* a, int64_t lda,
                    const H* b, int64_t ldb, float* c, int64_t ldc, StoreOf store_of) {
  PackBuffers& buffers = pack_buffers();
  // k in equal blocks of at most kKc, rounded up to whole 8s for the packing's vector loops.
  const int64_t k_blocks = (k + kKc - 1) / kKc;
  const int64_t kc_step = std::min(kKc, ((k + k_blocks - 1) / k_blocks + 7) / 8 * 8);
  for (int64_t jc = 0; jc < n; jc += kNc) {
    const int64_t nc = std::min(kNc, n - jc);
    for (int64_t pc = 0; pc < k; pc += kc_step) {
      const int64_t kc = std::min(kc_step, k - pc);
      pack_b(tb, kc, nc, tb ? b + jc * ldb + pc : b + pc * ldb + jc, ldb, buffers.b);
      for (int64_t ic = 0; ic < m; ic += kMc) {
        const int64_t mc = std::min(kMc, m - ic);
        pack_a(ta, mc, kc, ta ? a + pc * lda + ic : a + ic * lda + pc, lda, buffers.a);
        auto tiles = [&]<Store S>() {
          for (int64_t jr = 0; jr < nc; jr += kNr)
            for (int64_t ir = 0; ir < mc; ir += kMr)
              micro_kernel<S>(kc, buffers.a + ir * kc, buffers.b + jr * kc,
                              c + (ic + ir) * ldc + jc + jr, ldc, std::min(kMr, mc - ir),
                              std::min(kNr, nc - jr));
        };
        switch (store_of(pc == 0)) {
          case Store::Assign:
            tiles.template operator()<Store::Assign>();
            break;
          case Store::Accumulate:
            tiles.template operator()<Store::Accumulate>();
            break;
          case Store::AddRoundedBf16:
            tiles.template operator()<Store::AddRoundedBf16>();
            break;
          case Store::AddRoundedHalf:
            tiles.template operator()<Store::AddRoundedHalf>();
            break;
        }
      }
    }
  }
}

}  // namespace

bool gemm_packed16_supported() {
  const detail::CpuFeatures& f = detail::cpu_features();
  return f.avx2 && f.f16c;
}

template <class H>
void gemm_packed16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const H* a, int64_t lda,
                   const H* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  ADJOINT_ASSERT(gemm_packed16_supported() && (beta == 0 || beta == 1) && k > 0);
  packed_product(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, [&](bool first) {
    return first && beta == 0 ? Store::Assign : Store::Accumulate;
  });
}

template <class H>
void gemm_packed16_add_rounded(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const H* a,
                               int64_t lda, const H* b, int64_t ldb, float* c, int64_t ldc) {
  ADJOINT_ASSERT(gemm_packed16_supported() && k > 0 && k <= kPackedAddRoundedMaxK);
  constexpr Store store =
      std::is_same_v<H, BFloat16> ? Store::AddRoundedBf16 : Store::AddRoundedHalf;
  packed_product(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, [](bool) { return store; });
}

template void gemm_packed16<BFloat16>(bool, bool, int64_t, int64_t, int64_t, const BFloat16*,
                                      int64_t, const BFloat16*, int64_t, float, float*, int64_t);
template void gemm_packed16<Half>(bool, bool, int64_t, int64_t, int64_t, const Half*, int64_t,
                                  const Half*, int64_t, float, float*, int64_t);
template void gemm_packed16_add_rounded<BFloat16>(bool, bool, int64_t, int64_t, int64_t,
                                                  const BFloat16*, int64_t, const BFloat16*,
                                                  int64_t, float*, int64_t);
template void gemm_packed16_add_rounded<Half>(bool, bool, int64_t, int64_t, int64_t, const Half*,
                                              int64_t, const Half*, int64_t, float*, int64_t);

}  // namespace adjoint::kernels
