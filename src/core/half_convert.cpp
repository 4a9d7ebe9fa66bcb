// The conversion paths of half_convert.h. The SIMD functions are compiled for their instruction
// set with target attributes (the rest of the library is built for baseline x86-64) and only
// called after a CPUID check; their tails run the portable scalar code, which gives the same bits.
#include "core/half_convert.h"

#include <immintrin.h>

#include "adjoint/error.h"
#include "adjoint/mixed_precision.h"
#include "core/cpu_features.h"

namespace adjoint::detail {
namespace {

bool cpu_has_f16c() { return cpu_features().f16c; }
bool cpu_has_avx2() { return cpu_features().avx2; }
bool cpu_has_avx512_bf16() { return cpu_features().avx512_bf16; }

void float_to_half_portable(const float* in, Half* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i].bits = float_to_half_bits(in[i]);
}
void half_to_float_portable(const Half* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = half_bits_to_float(in[i].bits);
}
void float_to_bfloat16_portable(const float* in, BFloat16* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i].bits = float_to_bfloat16_bits(in[i]);
}
void bfloat16_to_float_portable(const BFloat16* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bfloat16_bits_to_float(in[i].bits);
}

__attribute__((target("avx,f16c"))) void float_to_half_f16c(const float* in, Half* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  float_to_half_portable(in + i, out + i, n - i);
}

__attribute__((target("avx,f16c"))) void half_to_float_f16c(const Half* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  half_to_float_portable(in + i, out + i, n - i);
}

// VCVTNEPS2BF16 rounds to nearest even and quiets NaNs as the portable code does, but treats
// float32 subnormals as zero; the lanes holding one (exponent 0, fraction not 0) are redone with
// the portable rounding in integer arithmetic: u + 0x7fff + ((u >> 16) & 1), then >> 16.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) inline __m256i
narrow_bfloat16_avx512(__m512 x) {
  const __m512i exp_mask = _mm512_set1_epi32(0x7f800000);
  const __m512i frac_mask = _mm512_set1_epi32(0x007fffff);
  __m256i r = (__m256i)_mm512_cvtneps_pbh(x);
  const __m512i u = _mm512_castps_si512(x);
  const __mmask16 subnormal =
      _mm512_testn_epi32_mask(u, exp_mask) & _mm512_test_epi32_mask(u, frac_mask);
  if (subnormal) [[unlikely]] {
    const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, bias), lsb), 16);
    r = _mm256_mask_mov_epi16(r, subnormal, _mm512_cvtepi32_epi16(rounded));
  }
  return r;
}
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void float_to_bfloat16_avx512(
    const float* in, BFloat16* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        narrow_bfloat16_avx512(_mm512_loadu_ps(in + i)));
  float_to_bfloat16_portable(in + i, out + i, n - i);
}

// Widening is a 16-bit shift; AVX-512 does 16 lanes at a time.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void bfloat16_to_float_avx512(
    const BFloat16* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i w =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  bfloat16_to_float_portable(in + i, out + i, n - i);
}

// Without AVX512-BF16 (Zen 3) bfloat16 is rounded with the portable integer arithmetic, eight
// lanes at a time: a NaN keeps its top bits and is made quiet, anything else gets
// u + 0x7fff + ((u >> 16) & 1), then >> 16 (no overflow: the largest non-NaN pattern is -inf).
__attribute__((target("avx2"))) __m256i round_to_bfloat16_avx2(__m256i u) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1);
  const __m256i top = _mm256_srli_epi32(u, 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
  const __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(u, bias), _mm256_and_si256(top, one)), 16);
  const __m256i quiet = _mm256_or_si256(top, _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, nan);
}

__attribute__((target("avx2"))) void float_to_bfloat16_avx2(const float* in, BFloat16* out,
                                                            int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo =
        round_to_bfloat16_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    const __m256i hi =
        round_to_bfloat16_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 8)));
    // packus works within 128-bit halves (lo 0-3, hi 0-3, lo 4-7, hi 4-7); the permute puts
    // the four 64-bit quarters back in order. Every lane is at most 0xffff, so none saturates.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  float_to_bfloat16_portable(in + i, out + i, n - i);
}

__attribute__((target("avx2"))) void bfloat16_to_float_avx2(const BFloat16* in, float* out,
                                                            int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
  }
  bfloat16_to_float_portable(in + i, out + i, n - i);
}

// The round trips (round_through_*): the narrowing of each path above, widened again in the
// same registers.
void round_through_half_portable(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = half_bits_to_float(float_to_half_bits(in[i]));
}
void round_through_bfloat16_portable(const float* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bfloat16_bits_to_float(float_to_bfloat16_bits(in[i]));
}
__attribute__((target("avx,f16c"))) void round_through_half_f16c(const float* in, float* out,
                                                                 int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(in + i),
                                                              _MM_FROUND_TO_NEAREST_INT)));
  round_through_half_portable(in + i, out + i, n - i);
}
// narrow_bfloat16_avx512, then shifted back.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void round_through_bfloat16_avx512(
    const float* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i r = narrow_bfloat16_avx512(_mm512_loadu_ps(in + i));
    _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(r), 16)));
  }
  round_through_bfloat16_portable(in + i, out + i, n - i);
}
__attribute__((target("avx2"))) void round_through_bfloat16_avx2(const float* in, float* out,
                                                                 int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i r =
        round_to_bfloat16_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_slli_epi32(r, 16));
  }
  round_through_bfloat16_portable(in + i, out + i, n - i);
}

void check_path(ConvertPath path, bool applies, const char* what) {
  ADJOINT_CHECK(applies, Value, what, "the ", to_string(path),
                " conversion path does not convert this type");
  ADJOINT_CHECK(convert_path_supported(path), Value, what, "this CPU lacks the ", to_string(path),
                " conversion path");
}

bool converts_half(ConvertPath p) { return p == ConvertPath::Portable || p == ConvertPath::F16C; }
bool converts_bfloat16(ConvertPath p) { return p != ConvertPath::F16C; }

}  // namespace

std::string_view to_string(ConvertPath path) {
  switch (path) {
    case ConvertPath::Portable:
      return "portable";
    case ConvertPath::F16C:
      return "f16c";
    case ConvertPath::Avx2:
      return "avx2";
    case ConvertPath::Avx512Bf16:
      return "avx512bf16";
  }
  return "unknown";
}

bool convert_path_supported(ConvertPath path) {
  switch (path) {
    case ConvertPath::Portable:
      return true;
    case ConvertPath::F16C:
      return cpu_has_f16c();
    case ConvertPath::Avx2:
      return cpu_has_avx2();
    case ConvertPath::Avx512Bf16:
      return cpu_has_avx512_bf16();
  }
  return false;
}

ConvertPath default_half_path() {
  return cpu_has_f16c() ? ConvertPath::F16C : ConvertPath::Portable;
}
ConvertPath default_bfloat16_path() {
  if (cpu_has_avx512_bf16()) return ConvertPath::Avx512Bf16;
  return cpu_has_avx2() ? ConvertPath::Avx2 : ConvertPath::Portable;
}

void float_to_half(const float* in, Half* out, int64_t n, ConvertPath path) {
  check_path(path, converts_half(path), "to");
  if (path == ConvertPath::F16C) return float_to_half_f16c(in, out, n);
  float_to_half_portable(in, out, n);
}

void half_to_float(const Half* in, float* out, int64_t n, ConvertPath path) {
  check_path(path, converts_half(path), "to");
  if (path == ConvertPath::F16C) return half_to_float_f16c(in, out, n);
  half_to_float_portable(in, out, n);
}

void float_to_bfloat16(const float* in, BFloat16* out, int64_t n, ConvertPath path) {
  check_path(path, converts_bfloat16(path), "to");
  if (path == ConvertPath::Avx512Bf16) return float_to_bfloat16_avx512(in, out, n);
  if (path == ConvertPath::Avx2) return float_to_bfloat16_avx2(in, out, n);
  float_to_bfloat16_portable(in, out, n);
}

void bfloat16_to_float(const BFloat16* in, float* out, int64_t n, ConvertPath path) {
  check_path(path, converts_bfloat16(path), "to");
  if (path == ConvertPath::Avx512Bf16) return bfloat16_to_float_avx512(in, out, n);
  if (path == ConvertPath::Avx2) return bfloat16_to_float_avx2(in, out, n);
  bfloat16_to_float_portable(in, out, n);
}

void round_through_half(const float* in, float* out, int64_t n, ConvertPath path) {
  check_path(path, converts_half(path), "to");
  if (path == ConvertPath::F16C) return round_through_half_f16c(in, out, n);
  round_through_half_portable(in, out, n);
}

void round_through_bfloat16(const float* in, float* out, int64_t n, ConvertPath path) {
  check_path(path, converts_bfloat16(path), "to");
  if (path == ConvertPath::Avx512Bf16) return round_through_bfloat16_avx512(in, out, n);
  if (path == ConvertPath::Avx2) return round_through_bfloat16_avx2(in, out, n);
  round_through_bfloat16_portable(in, out, n);
}

}  // namespace adjoint::detail

namespace adjoint {

std::string half_conversion_path() {
  return std::string(detail::to_string(detail::default_half_path()));
}
std::string bfloat16_conversion_path() {
  return std::string(detail::to_string(detail::default_bfloat16_path()));
}

}  // namespace adjoint
