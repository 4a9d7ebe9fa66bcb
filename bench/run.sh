#!/usr/bin/env bash
# Runs adjoint-bench and the libtorch reference (../shared/bench, built with its build.sh)
# side by side: for each workload, adjoint and libtorch alternate REPS times with the same
# thread count. Prints every JSON line, then a table of medians and adjoint/libtorch ratios.
#   bench/run.sh [BUILD_DIR]      (default build)
# Environment: REPS=3 THREADS=2 WORKLOADS="op-overhead mlp deep-mlp hvp jacobian per-sample-grads ode-adjoint gpt-tiny", BENCH_ARGS (extra flags
# for both binaries, e.g. "--steps 10"), TORCH_BUILD=/tmp/torch-ref-build, OUT=results file.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-build}
case "$BUILD" in /*) ;; *) BUILD="$REPO/$BUILD" ;; esac
REPS=${REPS:-3}
THREADS=${THREADS:-2}
WORKLOADS=${WORKLOADS:-op-overhead mlp deep-mlp hvp jacobian per-sample-grads ode-adjoint gpt-tiny}
# Workloads the libtorch reference does not have: adjoint runs alone.
ADJOINT_ONLY=" ode-adjoint "
read -r -a EXTRA <<<"${BENCH_ARGS:-}"
SHARED=${ADJOINT_SHARED_DIR:-$REPO/../shared}
TORCH_BUILD=${TORCH_BUILD:-/tmp/torch-ref-build}
OUT=${OUT:-$BUILD/bench/results.jsonl}

if [ ! -f "$SHARED/bench/build.sh" ]; then
  echo "error: libtorch reference not found at $SHARED/bench (set ADJOINT_SHARED_DIR)" >&2
  exit 1
fi

# adjoint-bench (configures the build folder if it is not one yet; a no-op when up to date).
[ -f "$BUILD/CMakeCache.txt" ] || cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target adjoint-bench >/dev/null
ADJOINT_BENCH="$BUILD/bench/adjoint-bench"

# torch-ref (build.sh installs libtorch-dev if missing and prints the binaries' paths).
echo "building the libtorch reference in $TORCH_BUILD ..." >&2
TORCH_BINS=$(bash "$SHARED/bench/build.sh" "$TORCH_BUILD")
TORCH_REF=${TORCH_BINS%%$'\n'*}
[ -x "$TORCH_REF" ] || { echo "error: torch-ref was not built ($TORCH_REF)" >&2; exit 1; }

mkdir -p "$(dirname "$OUT")"
: >"$OUT"
failed=0
run_one() {  # run_one NAME BINARY WORKLOAD: appends its JSON line to $OUT and prints it
  local line
  if line=$("$2" --workload "$3" --threads "$THREADS" "${EXTRA[@]}"); then
    echo "$line" | tee -a "$OUT"
  else
    echo "error: $1 failed on $3" >&2
    failed=1
  fi
}
for w in $WORKLOADS; do
  for ((r = 1; r <= REPS; ++r)); do
    run_one adjoint "$ADJOINT_BENCH" "$w"
    [[ "$ADJOINT_ONLY" == *" $w "* ]] || run_one libtorch "$TORCH_REF" "$w"
  done
done

echo
python3 "$REPO/bench/compare.py" "$OUT"
echo "(JSON lines saved in $OUT)"
exit "$failed"
