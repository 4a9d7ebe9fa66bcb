// Bulk conversions between float32 and the 16-bit floats, with one implementation per
// instruction set chosen at run time: F16C for float16, AVX512-BF16 or else AVX2 for bfloat16, and
// the portable scalar code of adjoint/half.h everywhere. Every path gives the same bits (Note [Half
// conversions]); tests/core/half_convert_test.cpp checks that over all 65,536 patterns.
#pragma once

#include <cstdint>
#include <string_view>

#include "adjoint/half.h"

namespace adjoint::detail {

enum class ConvertPath { Portable, F16C, Avx2, Avx512Bf16 };

std::string_view to_string(ConvertPath path);

/// Whether this CPU (and OS) runs the path. Portable always does.
bool convert_path_supported(ConvertPath path);

/// The path used when none is named, the best the CPU has (capped by ADJOINT_MAX_CPU_ISA, Note
/// [The ISA cap]): F16C for float16; AVX512-BF16, else AVX2, for bfloat16; else Portable.
ConvertPath default_half_path();
ConvertPath default_bfloat16_path();

// n elements from in to out (no overlap). `path` must be supported and apply to the type
// (F16C to float16, Avx2 and Avx512Bf16 to bfloat16); Portable applies to both.
void float_to_half(const float* in, Half* out, int64_t n, ConvertPath path);
void half_to_float(const Half* in, float* out, int64_t n, ConvertPath path);
void float_to_bfloat16(const float* in, BFloat16* out, int64_t n, ConvertPath path);
void bfloat16_to_float(const BFloat16* in, float* out, int64_t n, ConvertPath path);

/// out[i] = in[i] rounded to float16 (bfloat16) and widened back, in registers: the bits of
/// narrowing and widening through memory, without the 16-bit buffer (what a fused loop does
/// after each 16-bit result). `out` may be `in`; the path rules are those above.
void round_through_half(const float* in, float* out, int64_t n, ConvertPath path);
void round_through_bfloat16(const float* in, float* out, int64_t n, ConvertPath path);

// The same on the default paths.
inline void convert(const float* in, Half* out, int64_t n) {
  float_to_half(in, out, n, default_half_path());
}
inline void convert(const Half* in, float* out, int64_t n) {
  half_to_float(in, out, n, default_half_path());
}
inline void convert(const float* in, BFloat16* out, int64_t n) {
  float_to_bfloat16(in, out, n, default_bfloat16_path());
}
inline void convert(const BFloat16* in, float* out, int64_t n) {
  bfloat16_to_float(in, out, n, default_bfloat16_path());
}
inline void round_through(const float* in, float* out, int64_t n, Half) {
  round_through_half(in, out, n, default_half_path());
}
inline void round_through(const float* in, float* out, int64_t n, BFloat16) {
  round_through_bfloat16(in, out, n, default_bfloat16_path());
}

}  // namespace adjoint::detail
