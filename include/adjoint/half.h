// The 16-bit floating storage types float16 (IEEE binary16) and bfloat16 (float32's top half).
// They are storage only: kernels load them into float32 ("opmath"), compute, and store back, so
// these types have no arithmetic, and their conversions are explicit. The scalar conversions
// here are the portable path of src/core/half_convert.cpp; see Note [Half conversions].
#pragma once

#include <bit>
#include <cstdint>

namespace adjoint {

namespace detail {

// Note [Half conversions]
// float32 -> 16 bits rounds to nearest, ties to even; an overflow becomes an infinity of the
// value's sign; a NaN stays a NaN with its sign and the top of its payload, made quiet (as
// x86's VCVTPS2PH and VCVTNEPS2BF16 do); float16 subnormals are produced and read exactly, and
// bfloat16 keeps float32's subnormals too (VCVTNEPS2BF16 flushes them to zero, so its path patches
// those lanes). 16 bits -> float32 is exact; a float16 signaling NaN becomes quiet (as VCVTPH2PS
// does), a bfloat16 one is widened bit for bit.

inline uint16_t float_to_bfloat16_bits(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even on the low 16 bits
  return static_cast<uint16_t>(u >> 16);
}

inline float bfloat16_bits_to_float(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

inline uint16_t float_to_half_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | ((a >> 13) & 0x3ffu);  // NaN, made quiet
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 (halfway past 65504): infinity
  if (a >= 0x38800000u) {                       // >= 2^-14: a normal float16
    uint32_t r = a - 0x38000000u;               // rebias the exponent from 127 to 15
    r += 0xfffu + ((r >> 13) & 1u);             // round to nearest even on the low 13 bits
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (a <= 0x33000000u) return sign;  // <= 2^-25, half the smallest subnormal: ties to 0
  // A subnormal: the significand with its implicit bit, in units of 2^-24.
  const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;  // may carry into the smallest normal
  return static_cast<uint16_t>(sign | q);
}

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
  if (e == 0) {
    if (m == 0) return std::bit_cast<float>(sign);
    const int shift = std::countl_zero(m) - 21;  // moves the leading 1 to bit 10
    m = (m << shift) & 0x3ffu;
    e = 1 - shift + 112;  // the biased float32 exponent (112 = 127 - 15)
    return std::bit_cast<float>(sign | (e << 23) | (m << 13));
  }
  return std::bit_cast<float>(sign | ((e + 112) << 23) | (m << 13));
}

}  // namespace detail

/// IEEE binary16: 1 sign, 5 exponent, 10 fraction bits (max 65504, epsilon 2^-10).
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f) : bits(detail::float_to_half_bits(f)) {}
  static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
  explicit operator float() const { return detail::half_bits_to_float(bits); }
};

/// bfloat16: float32's sign, 8 exponent bits and the top 7 fraction bits (epsilon 2^-7).
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(detail::float_to_bfloat16_bits(f)) {}
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }
  explicit operator float() const { return detail::bfloat16_bits_to_float(bits); }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

}  // namespace adjoint
