#!/usr/bin/env bash
# Runs a command as it would run on AMD Zen 3 (AVX2, FMA and F16C; no AVX-512, no AVX512-BF16)
# on a machine that has more: adjoint's conversions, Highway kernels and oneDNN matmuls are
# capped by ADJOINT_MAX_CPU_ISA (Note [The ISA cap] in src/core/cpu_features.h), OpenBLAS, which
# picks its kernels when it loads, by OPENBLAS_CORETYPE, and libtorch's own kernels by
# ATEN_CPU_CAPABILITY and ONEDNN_MAX_CPU_ISA. The instruction sets match Zen 3's; the core's
# timings (caches, ports, clocks) stay the host's.
#   bench/emulate-zen3.sh build/bench/adjoint-bench --workload gpt-tiny --precision bf16
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
export ADJOINT_MAX_CPU_ISA=avx2 ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Zen ATEN_CPU_CAPABILITY=avx2
exec "$@"
