// Which kernels the matmuls and the 16-bit conversions run on. (The 16-bit dtypes themselves are in
// dtype.h and half.h; docs/mixed-precision.md describes the whole.)
#pragma once

#include <string>

namespace adjoint {

/// The kernel bfloat16 matmuls run on here: "onednn:avx512_core_amx" or
/// "onednn:avx512_core_bf16" where the CPU multiplies bfloat16 natively; else "packed:avx2" on
/// CPUs with AVX2 but not AVX-512 (Zen 3: the operands are widened block by block while packed
/// for adjoint's own kernel), else "sgemm" (operands widened to float32 copies, then sgemm).
std::string bf16_matmul_backend();
/// The same for float16 matmuls: "packed:avx2" or "sgemm" (no x86 CPU multiplies float16).
std::string float16_matmul_backend();

/// The kernels float32 matmuls run on here: "openblas:CORE" (OpenBLAS's kernel set for this
/// CPU); on AVX-512 CPUs "openblas:CORE, onednn:ISA for large products"; or "onednn:ISA
/// (OpenBLAS core CORE)" where OpenBLAS fell back to kernels without AVX2 on a CPU that has it (a
/// CPU newer than the OpenBLAS release). ADJOINT_SGEMM=openblas|onednn|bysize overrides the
/// choice. docs/mixed-precision.md, "float32 products: OpenBLAS and oneDNN".
std::string float32_matmul_backend();

/// The float16 and bfloat16 conversion paths chosen for this CPU: "f16c" or "portable", and
/// "avx512bf16" or "portable".
std::string half_conversion_path();
std::string bfloat16_conversion_path();

}  // namespace adjoint
