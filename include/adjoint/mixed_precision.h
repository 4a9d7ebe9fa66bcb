// Mixed precision: what the float16/bfloat16 kernels run on. (The dtypes themselves are in
// dtype.h and half.h; docs/mixed-precision.md describes the whole.)
#pragma once

#include <string>

namespace adjoint {

/// The kernel bfloat16 matmuls run on here: "onednn:avx512_core_amx" or
/// "onednn:avx512_core_bf16" where the CPU multiplies bfloat16 natively, else "sgemm" (operands
/// widened to float32). float16 matmuls always widen and run sgemm.
std::string bf16_matmul_backend();

/// The float16 and bfloat16 conversion paths chosen for this CPU: "f16c" or "portable", and
/// "avx512bf16" or "portable".
std::string half_conversion_path();
std::string bfloat16_conversion_path();

}  // namespace adjoint
