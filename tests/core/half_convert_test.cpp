// The float16/bfloat16 conversions (Note [Half conversions]) on every path this CPU has,
// against an oracle that shares no code with them: each 16-bit pattern decoded with ldexp from
// its fields, and float32 -> 16 bits as the nearest of those decoded values (ties to the even
// pattern), found by binary search. Widening is checked over all 65,536 patterns of each type;
// narrowing over every representable value, every midpoint between neighbours and the floats
// one ulp either side of it, NaN payloads, infinities, float32 subnormals and random patterns.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "adjoint/error.h"
#include "core/cpu_features.h"
#include "core/half_convert.h"

using namespace adjoint;
using namespace adjoint::detail;

namespace {

struct Format {
  const char* name;
  int frac_bits;  // stored fraction bits
  int exp_bits;
  int bias;
};
constexpr Format kHalfFormat{"float16", 10, 5, 15};
constexpr Format kBF16{"bfloat16", 7, 8, 127};

// The value of a 16-bit pattern from its fields (NaN for NaN patterns).
double decode(const Format& f, uint16_t bits) {
  const int e = (bits >> f.frac_bits) & ((1 << f.exp_bits) - 1);
  const int m = bits & ((1 << f.frac_bits) - 1);
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (e == (1 << f.exp_bits) - 1) return m ? std::nan("") : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(m, 1 - f.bias - f.frac_bits);
  return sign * std::ldexp(m + (1 << f.frac_bits), e - f.bias - f.frac_bits);
}

// float32 -> the 16-bit pattern nearest to it, ties to the even pattern; beyond the largest
// finite value the next step (an infinity, even) takes part. Not for NaN.
class NearestOracle {
 public:
  explicit NearestOracle(const Format& f) {
    const uint16_t inf = static_cast<uint16_t>(((1 << f.exp_bits) - 1) << f.frac_bits);
    for (uint32_t b = 0; b < inf; ++b) values_.push_back(decode(f, static_cast<uint16_t>(b)));
    // The infinity stands where the next finite value would be: max + one ulp of max.
    const double max = values_.back();
    values_.push_back(max + (max - values_[values_.size() - 2]));
    inf_ = inf;
  }
  uint16_t operator()(float x) const {
    const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(x));
    if (a >= values_.back()) return sign | inf_;
    const auto hi = static_cast<uint16_t>(std::lower_bound(values_.begin(), values_.end(), a) -
                                          values_.begin());
    if (values_[hi] == a) return sign | hi;
    const auto lo = static_cast<uint16_t>(hi - 1);
    const double dlo = a - values_[lo], dhi = values_[hi] - a;
    if (dlo < dhi) return sign | lo;
    if (dhi < dlo) return sign | hi;
    return sign | ((lo & 1) ? hi : lo);
  }

 private:
  std::vector<double> values_;  // the non-negative finite values in order, then the infinity
  uint16_t inf_;
};

// The SIMD paths of a type that this CPU runs (the portable one is the reference).
std::vector<ConvertPath> paths_for(std::initializer_list<ConvertPath> simd) {
  std::vector<ConvertPath> out;
  for (ConvertPath p : simd)
    if (convert_path_supported(p)) out.push_back(p);
  return out;
}

const std::initializer_list<ConvertPath> kHalfPaths{ConvertPath::F16C};
const std::initializer_list<ConvertPath> kBFloat16Paths{ConvertPath::Avx2, ConvertPath::Avx512Bf16};

// Narrowing inputs: every finite value of the format, the midpoints to its neighbour and one
// float ulp either side, both signs; specials; float32 subnormals; random bit patterns.
std::vector<float> narrowing_inputs(const Format& f) {
  std::vector<float> in;
  const uint16_t inf = static_cast<uint16_t>(((1 << f.exp_bits) - 1) << f.frac_bits);
  for (uint32_t b = 0; b < inf; ++b) {
    const double v = decode(f, static_cast<uint16_t>(b));
    const double next = b + 1 < inf ? decode(f, static_cast<uint16_t>(b + 1)) : 2 * v;
    const auto mid = static_cast<float>((v + next) / 2);  // exact: needs frac_bits + 2 bits
    for (float x :
         {static_cast<float>(v), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) {
      in.push_back(x);
      in.push_back(-x);
    }
  }
  for (uint32_t u : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fbfffffu,
                     0xff812345u, 0x7fffffffu, 0x7f7fffffu, 0x00000001u, 0x807fffffu, 0x00400000u})
    in.push_back(std::bit_cast<float>(u));
  std::mt19937 rng(13);
  for (int i = 0; i < 1 << 18; ++i)
    in.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  for (int i = 0; i < 1 << 14; ++i)  // float32 subnormals
    in.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng() & 0x807fffffu)));
  return in;
}

bool is_nan16(const Format& f, uint16_t b) {
  const uint16_t inf = static_cast<uint16_t>(((1 << f.exp_bits) - 1) << f.frac_bits);
  return (b & 0x7fff) > inf;
}

template <class H, class Narrow>
void check_narrowing(const Format& f, std::initializer_list<ConvertPath> simd, Narrow narrow) {
  const NearestOracle oracle(f);
  const std::vector<float> in = narrowing_inputs(f);
  std::vector<H> portable(in.size());
  narrow(in.data(), portable.data(), static_cast<int64_t>(in.size()), ConvertPath::Portable);
  const uint16_t quiet = static_cast<uint16_t>(1 << (f.frac_bits - 1));
  for (std::size_t i = 0; i < in.size(); ++i) {
    const uint16_t got = portable[i].bits;
    if (std::isnan(in[i])) {
      ASSERT_TRUE(is_nan16(f, got)) << f.name << " " << std::hex << std::bit_cast<uint32_t>(in[i]);
      ASSERT_EQ(got & 0x8000, (std::bit_cast<uint32_t>(in[i]) >> 16) & 0x8000);
      ASSERT_TRUE(got & quiet) << "a NaN comes out quiet";
    } else {
      ASSERT_EQ(got, oracle(in[i])) << f.name << " of " << std::hexfloat << in[i];
    }
  }
  for (ConvertPath p : paths_for(simd)) {
    std::vector<H> out(in.size());
    // An odd count so that the vector loop and its scalar tail both run.
    narrow(in.data(), out.data(), static_cast<int64_t>(in.size()), p);
    for (std::size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(out[i].bits, portable[i].bits) << f.name << " path " << to_string(p) << " on "
                                               << std::hex << std::bit_cast<uint32_t>(in[i]);
  }
}

template <class H, class Widen>
void check_widening(const Format& f, std::initializer_list<ConvertPath> simd, Widen widen) {
  std::vector<H> in(65536);
  for (uint32_t b = 0; b < 65536; ++b) in[b] = H::from_bits(static_cast<uint16_t>(b));
  std::vector<float> portable(in.size());
  widen(in.data(), portable.data(), 65536, ConvertPath::Portable);
  for (uint32_t b = 0; b < 65536; ++b) {
    const double want = decode(f, static_cast<uint16_t>(b));
    const uint32_t got = std::bit_cast<uint32_t>(portable[b]);
    ASSERT_EQ(got >> 31, b >> 15) << "sign of " << std::hex << b;
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(portable[b])) << std::hex << b;
    } else {
      ASSERT_EQ(static_cast<double>(portable[b]), want) << f.name << " pattern " << std::hex << b;
    }
  }
  for (ConvertPath p : paths_for(simd)) {
    std::vector<float> out(in.size());
    widen(in.data(), out.data(), 65535, p);  // odd: the scalar tail too
    for (uint32_t b = 0; b < 65535; ++b)
      ASSERT_EQ(std::bit_cast<uint32_t>(out[b]), std::bit_cast<uint32_t>(portable[b]))
          << f.name << " path " << to_string(p) << " on pattern " << std::hex << b;
  }
}

TEST(HalfConvert, Float16WideningIsExactOnAllPatternsAndPathsAgree) {
  check_widening<Half>(kHalfFormat, kHalfPaths, half_to_float);
}

TEST(HalfConvert, BFloat16WideningIsExactOnAllPatternsAndPathsAgree) {
  check_widening<BFloat16>(kBF16, kBFloat16Paths, bfloat16_to_float);
}

TEST(HalfConvert, Float16NarrowingRoundsToNearestEvenOnEveryPath) {
  check_narrowing<Half>(kHalfFormat, kHalfPaths, float_to_half);
}

TEST(HalfConvert, BFloat16NarrowingRoundsToNearestEvenOnEveryPath) {
  check_narrowing<BFloat16>(kBF16, kBFloat16Paths, float_to_bfloat16);
}

// The in-register round trips equal narrowing and widening through memory on the portable path,
// on every path, in place or not, over the narrowing inputs (an odd count: tails run too).
template <class H, class Narrow, class Widen, class Round>
void check_round_trip(const Format& f, std::initializer_list<ConvertPath> simd, Narrow narrow,
                      Widen widen, Round round) {
  const std::vector<float> in = narrowing_inputs(f);
  const auto n = static_cast<int64_t>(in.size()) - 1;
  std::vector<H> narrow16(in.size());
  std::vector<float> want(in.size());
  narrow(in.data(), narrow16.data(), n, ConvertPath::Portable);
  widen(narrow16.data(), want.data(), n, ConvertPath::Portable);
  std::vector<ConvertPath> paths = paths_for(simd);
  paths.push_back(ConvertPath::Portable);
  for (ConvertPath p : paths) {
    std::vector<float> out(in.size()), inplace = in;
    round(in.data(), out.data(), n, p);
    round(inplace.data(), inplace.data(), n, p);
    for (int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      ASSERT_EQ(std::bit_cast<uint32_t>(out[k]), std::bit_cast<uint32_t>(want[k]))
          << f.name << " path " << to_string(p) << " on " << std::hex
          << std::bit_cast<uint32_t>(in[k]);
      ASSERT_EQ(std::bit_cast<uint32_t>(inplace[k]), std::bit_cast<uint32_t>(want[k]));
    }
  }
}

TEST(HalfConvert, RoundTripsEqualNarrowingThenWideningOnEveryPath) {
  check_round_trip<Half>(kHalfFormat, kHalfPaths, float_to_half, half_to_float, round_through_half);
  check_round_trip<BFloat16>(kBF16, kBFloat16Paths, float_to_bfloat16, bfloat16_to_float,
                             round_through_bfloat16);
}

TEST(HalfConvert, KnownValues) {
  // Hand-checked anchors beside the oracle: the largest float16, its overflow threshold, the
  // smallest subnormal and ties on both sides.
  EXPECT_EQ(Half(65504.0f).bits, 0x7bff);
  EXPECT_EQ(Half(65519.99f).bits, 0x7bff);
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00);
  EXPECT_EQ(Half(0x1p-24f).bits, 0x0001);
  EXPECT_EQ(Half(0x1p-25f).bits, 0x0000);         // tie with 0: even
  EXPECT_EQ(Half(0x1.8p-24f).bits, 0x0002);       // tie between 1 and 2 ulps: even (2)
  EXPECT_EQ(Half(1.0f + 0x1p-11f).bits, 0x3c00);  // tie: down to 1
  EXPECT_EQ(BFloat16(1.0f + 0x1p-8f).bits, 0x3f80);
  EXPECT_EQ(BFloat16(1.0f + 0x1.8p-7f).bits, 0x3f82);  // tie: up to even
  EXPECT_EQ(BFloat16(-0.0f).bits, 0x8000);
  EXPECT_EQ(static_cast<float>(BFloat16::from_bits(0x0001)), 0x1p-133f);  // subnormal
}

TEST(HalfConvert, UnsupportedPathIsAnError) {
  float x = 1;
  Half h;
  EXPECT_THROW(float_to_half(&x, &h, 1, ConvertPath::Avx512Bf16), Error);
  EXPECT_THROW(float_to_half(&x, &h, 1, ConvertPath::Avx2), Error);
  BFloat16 b;
  EXPECT_THROW(float_to_bfloat16(&x, &b, 1, ConvertPath::F16C), Error);
}

}  // namespace

namespace {

// The CPUID detection agrees with the kernel's view of the CPU (/proc/cpuinfo's flags), so the
// SIMD paths above really ran where the CPU has them.
TEST(HalfConvert, DetectionMatchesProcCpuinfo) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line) && line.rfind("flags", 0) != 0) {
  }
  if (line.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags line";
  auto has = [&](const std::string& flag) { return line.find(" " + flag) != std::string::npos; };
  // ADJOINT_MAX_CPU_ISA (Note [The ISA cap]) lowers what the library may use below what the
  // CPU has; ctest runs this test once more under the avx2 cap.
  const std::string_view cap = cpu_isa_cap();
  const bool baseline = cap == "baseline", no_avx512 = baseline || cap == "avx2";
  const bool no_bf16 = no_avx512 || cap == "avx512_core";
  EXPECT_EQ(convert_path_supported(ConvertPath::F16C), !baseline && has("f16c") && has("avx"));
  EXPECT_EQ(convert_path_supported(ConvertPath::Avx2),
            !baseline && has("avx2") && has("fma") && has("avx"));
  EXPECT_EQ(convert_path_supported(ConvertPath::Avx512Bf16),
            !no_bf16 && has("avx512_bf16") && has("avx512bw") && has("avx512vl"));
  const bool bf16 = convert_path_supported(ConvertPath::Avx512Bf16);
  const bool avx2 = convert_path_supported(ConvertPath::Avx2);
  EXPECT_EQ(default_bfloat16_path(), bf16   ? ConvertPath::Avx512Bf16
                                     : avx2 ? ConvertPath::Avx2
                                            : ConvertPath::Portable);
}

}  // namespace
