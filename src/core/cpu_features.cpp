// CPUID and XGETBV read directly (GCC's __builtin_cpu_supports knows these features, clang 14's,
// used by the fuzz build, does not): the instruction sets, and the OS saving their registers.
#include "core/cpu_features.h"

#include <cpuid.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

namespace adjoint::detail {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29),
             fma = c & (1u << 12);
  if (!osxsave) return f;
  uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool ymm_saved = (xcr0_lo & 0x6u) == 0x6u;    // SSE and AVX state
  const bool zmm_saved = (xcr0_lo & 0xe6u) == 0xe6u;  // and the AVX-512 state
  f.f16c = avx && f16c && ymm_saved;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  const bool avx2 = b & (1u << 5);
  const bool avx512f = b & (1u << 16), avx512bw = b & (1u << 30), avx512vl = b & (1u << 31);
  f.avx2 = avx && avx2 && fma && ymm_saved;
  f.avx512 = f.avx2 && avx512f && avx512bw && avx512vl && zmm_saved;
  if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return f;
  f.avx512_bf16 = f.avx512 && (a & (1u << 5));
  return f;
}

const std::string& cap_name() {
  static const std::string name = [] {
    const char* env = std::getenv("ADJOINT_MAX_CPU_ISA");
    return std::string(env ? env : "");
  }();
  return name;
}

// Lowers f to the named set; false for a name it does not know.
bool apply_cap(std::string_view cap, CpuFeatures& f) {
  if (cap == "avx512_core_bf16") return true;  // everything we use
  if (cap == "avx512_core") {
    f.avx512_bf16 = false;
    return true;
  }
  if (cap == "avx2") {
    f.avx512 = f.avx512_bf16 = false;
    return true;
  }
  if (cap == "baseline") {
    f = CpuFeatures{};
    return true;
  }
  return false;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f = detect();
    const std::string& cap = cap_name();
    if (!cap.empty() && !apply_cap(cap, f))
      std::cerr << "adjoint: ignoring ADJOINT_MAX_CPU_ISA=" << cap
                << " (known values: baseline, avx2, avx512_core, avx512_core_bf16)\n";
    return f;
  }();
  return features;
}

std::string_view cpu_isa_cap() { return cap_name(); }

}  // namespace adjoint::detail
