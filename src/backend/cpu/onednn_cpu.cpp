#include "backend/cpu/onednn_cpu.h"

#ifdef ADJOINT_HAVE_ONEDNN
#include "core/cpu_features.h"

extern "C" void omp_set_num_threads(int);

namespace adjoint::kernels {

dnnl::cpu_isa onednn_isa() {
  static const dnnl::cpu_isa isa = [] {
    // ADJOINT_MAX_CPU_ISA lowers oneDNN's ISA too (Note [The ISA cap]). set_max_cpu_isa only
    // works before oneDNN's first JIT; after that (or above a cap of ONEDNN_MAX_CPU_ISA) it
    // throws and the ISA stays as it is, which get_effective_cpu_isa then reports.
    const detail::CpuFeatures& cpu = detail::cpu_features();
    try {
      if (!cpu.avx2)
        dnnl::set_max_cpu_isa(dnnl::cpu_isa::sse41);
      else if (!cpu.avx512)
        dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
      else if (!cpu.avx512_bf16)
        dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx512_core);
    } catch (const dnnl::error&) {
    }
    return dnnl::get_effective_cpu_isa();
  }();
  return isa;
}

const char* onednn_isa_name() {
  switch (onednn_isa()) {
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::sse41:
      return "sse41";
    default:
      return "other";
  }
}

dnnl::engine& onednn_engine() {
  onednn_isa();  // the cap first
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

void onednn_one_thread_here() {
  thread_local bool done = (omp_set_num_threads(1), true);
  (void)done;
}

}  // namespace adjoint::kernels
#endif
