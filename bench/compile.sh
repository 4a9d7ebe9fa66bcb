#!/usr/bin/env bash
# compile's benchmarks beside eager adjoint and libtorch, alternating in one run (the machine
# is noisy): op-overhead and gpt-tiny run as torch-ref, adjoint-bench, adjoint-bench --compile;
# pointwise-chain (adjoint only) as adjoint-bench with and without --compile. Prints the JSON
# lines, then medians of ms_per_step (and ns_per_op) per configuration.
#   bench/compile.sh [BUILD_DIR]     (default build)
# Environment: REPS=3, WORKLOADS="op-overhead pointwise-chain gpt-tiny", TORCH_BUILD.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-build}
case "$BUILD" in /*) ;; *) BUILD="$REPO/$BUILD" ;; esac
REPS=${REPS:-3}
WORKLOADS=${WORKLOADS:-op-overhead pointwise-chain gpt-tiny}
SHARED=${ADJOINT_SHARED_DIR:-$REPO/../shared}
TORCH_BUILD=${TORCH_BUILD:-/tmp/torch-ref-build}
OUT=${OUT:-$BUILD/bench/compile.jsonl}

cmake --build "$BUILD" -j "$(nproc)" --target adjoint-bench >/dev/null
TORCH_BINS=$(bash "$SHARED/bench/build.sh" "$TORCH_BUILD")
TORCH_REF=${TORCH_BINS%%$'\n'*}
: >"$OUT"
for w in $WORKLOADS; do
  for ((r = 1; r <= REPS; ++r)); do
    if [ "$w" != pointwise-chain ]; then
      "$TORCH_REF" --workload "$w" --threads 2 | tee -a "$OUT"
    fi
    "$BUILD/bench/adjoint-bench" --workload "$w" --threads 2 | tee -a "$OUT"
    "$BUILD/bench/adjoint-bench" --workload "$w" --threads 2 --compile | tee -a "$OUT"
  done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    key = (r["workload"], r["impl"] + (" compile" if r.get("mode") == "compile" else ""))
    rows.setdefault(key, []).append(r)
print(f"{'workload':16} {'run':18} {'ms/step':>9} {'ns/op':>8} {'vs eager':>9}")
for (w, impl), rs in sorted(rows.items()):
    ms = statistics.median(r["ms_per_step"] for r in rs)
    eager = rows.get((w, "adjoint"))
    ratio = ms / statistics.median(r["ms_per_step"] for r in eager) if eager else float("nan")
    ns = statistics.median(r["ns_per_op"] for r in rs) if "ns_per_op" in rs[0] else float("nan")
    print(f"{w:16} {impl:18} {ms:9.3f} {ns:8.1f} {ratio:9.2f}")
PY
