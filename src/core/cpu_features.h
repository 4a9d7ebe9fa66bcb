// What this CPU can run, read once from CPUID, and the cap ADJOINT_MAX_CPU_ISA puts on it.
#pragma once

#include <string_view>

namespace adjoint::detail {

// Note [The ISA cap]
// Machines of ours have been seen with AVX-512 and AVX512-BF16 (Zen 4) and with AVX2, FMA and
// F16C only (Zen 3). Every run-time choice of adjoint's reads this one struct: the 16-bit
// conversions (half_convert.cpp), Highway's targets (simd_math.cpp), oneDNN's ISA
// (onednn_cpu.cpp) and which float32 products run on oneDNN (sgemm.cpp). ADJOINT_MAX_CPU_ISA
// lowers it, so one machine runs and measures the paths of a smaller one: `avx2` is Zen 3's set
// (no AVX-512 at all), `avx512_core` drops AVX512-BF16, `baseline` leaves plain x86-64 (no F16C,
// no AVX2). OpenBLAS picks its kernels when it loads, before any of our code runs, so a faithful
// emulation also sets OPENBLAS_CORETYPE (Zen 3: `Zen`); bench/emulate-zen3.sh does both.
struct CpuFeatures {
  bool f16c = false;         // AVX and F16C, with the OS saving the ymm registers
  bool avx2 = false;         // AVX2 and FMA
  bool avx512 = false;       // AVX-512 F, BW and VL, with the OS saving the zmm registers
  bool avx512_bf16 = false;  // and AVX512-BF16
};

/// The CPU's features as CPUID reports them, lowered by ADJOINT_MAX_CPU_ISA when it is set. An
/// unknown value of the variable is reported on stderr once and ignored.
const CpuFeatures& cpu_features();

/// The cap's value as named (empty when the variable is unset).
std::string_view cpu_isa_cap();

}  // namespace adjoint::detail
