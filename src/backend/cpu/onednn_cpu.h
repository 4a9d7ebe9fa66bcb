// What adjoint's two oneDNN users (bfloat16 products in gemm_bf16.cpp, float32 products in
// sgemm.cpp where OpenBLAS's kernels are too old for the CPU) share: the ISA cap, applied once
// before oneDNN's first JIT, and one OpenMP thread in every calling thread.
#pragma once

#ifdef ADJOINT_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>

namespace adjoint::kernels {

/// oneDNN's ISA after ADJOINT_MAX_CPU_ISA's cap (Note [The ISA cap]) is applied, which happens
/// on the first call of this or any function below.
dnnl::cpu_isa onednn_isa();
/// onednn_isa() for reports: "avx512_core_amx", "avx512_core_bf16", "avx512_core", "avx2", ...
const char* onednn_isa_name();
/// The one CPU engine every primitive is made on.
dnnl::engine& onednn_engine();
/// Limits oneDNN's OpenMP team to the calling thread (Note [Gemm threading]: the pool splits
/// the work, each piece runs on one thread). Cheap after the first call in a thread.
void onednn_one_thread_here();

}  // namespace adjoint::kernels
#endif
