#!/usr/bin/env bash
# Data-parallel training beside one process: for mlp and gpt-tiny, adjoint-bench with the
# whole batch on one process with 2 threads, then under `mpirun -np 2` with one thread per
# rank and half the batch each (DistributedDataParallel; gpt-tiny also with ZeRO stages 1 and
# 2), alternating REPS times. Prints every JSON line, then medians: ms per step, the ratio to
# the single process, time in collectives, the part backward did not hide, the overlap and
# the per-rank bytes.
#   bench/data_parallel.sh [BUILD_DIR]      (default build)
# Environment: REPS=3, STEPS (adjoint-bench's default when unset), OUT=results file.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-build}
case "$BUILD" in /*) ;; *) BUILD="$REPO/$BUILD" ;; esac
REPS=${REPS:-3}
OUT=${OUT:-$BUILD/bench/data_parallel.jsonl}
BENCH="$BUILD/bench/adjoint-bench"
[ -x "$BENCH" ] || { echo "error: $BENCH not built (make build)" >&2; exit 1; }
STEP_ARGS=()
[ -n "${STEPS:-}" ] && STEP_ARGS=(--steps "$STEPS")
# mpirun as root (containers, CI) and without ptrace rights; 2 ranks on 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
MPI=(mpirun -np 2 --oversubscribe)

mkdir -p "$(dirname "$OUT")"
: >"$OUT"
run() {  # run LABEL COMMAND...: appends {"label": LABEL, ...JSON} to $OUT
  local label=$1 line
  shift
  line=$("$@")
  echo "{\"label\":\"$label\",${line#\{}" | tee -a "$OUT"
}
for rep in $(seq "$REPS"); do
  for w in mlp gpt-tiny; do
    run "$w single" "$BENCH" --workload "$w" --threads 2 "${STEP_ARGS[@]}"
    run "$w ddp" "${MPI[@]}" "$BENCH" --workload "$w" --threads 1 --data-parallel "${STEP_ARGS[@]}"
    if [ "$w" = gpt-tiny ]; then
      for z in 1 2; do
        run "$w zero$z" "${MPI[@]}" "$BENCH" --workload "$w" --threads 1 --data-parallel \
          --zero "$z" "${STEP_ARGS[@]}"
      done
    fi
  done
done

python3 - "$OUT" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["label"], []).append(r)
def med(label, key):
    vals = [r[key] for r in by.get(label, []) if r.get(key) is not None]
    return statistics.median(vals) if vals else float("nan")
print(f"\n{'run':<16}{'ms/step':>9}{'x single':>9}{'comm ms':>9}{'exposed':>9}{'overlap':>9}"
      f"{'params MB':>10}{'grads MB':>10}{'optim MB':>10}")
for label in by:
    w = label.split()[0]
    ms = med(label, "ms_per_step")
    ratio = ms / med(f"{w} single", "ms_per_step")
    mb = lambda k: med(label, k) / 2**20
    print(f"{label:<16}{ms:>9.2f}{ratio:>9.2f}{med(label, 'comm_ms'):>9.2f}"
          f"{med(label, 'exposed_comm_ms'):>9.2f}{med(label, 'overlap'):>9.2f}"
          f"{mb('rank_param_bytes'):>10.2f}{mb('rank_grad_bytes'):>10.2f}"
          f"{mb('rank_optimizer_state_bytes'):>10.2f}")
EOF
