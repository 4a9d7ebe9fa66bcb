#!/usr/bin/env bash
# adjoint-train under `mpirun -np 2`, end to end on a tiny model: the two-rank run (plain data
# parallel, and ZeRO stage 2) prints one progress and one summary (rank 0's), writes one
# loss.csv and checkpoint, and ends within float32 rounding of the one-process run; a run
# stopped under two ranks with ZeRO resumes under two ranks to the uninterrupted two-rank run's
# checkpoint byte for byte, and resumes under one process.
#   trainer_mpi_test.sh MPIEXEC path/to/adjoint-train
set -euo pipefail
mpiexec=$1
train=$(realpath "$2")
work=$(mktemp -d "${TMPDIR:-/tmp}/adjoint_train_mpi.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
for i in $(seq 600); do echo "line $i: the quick brown fox jumps over the lazy dog, $((i * 7919 % 1000))."; done >corpus.txt
tiny=(--layers 1 --width 16 --heads 2 --context 16 --batch 4 --warmup 3 --eval-every 5
      --steps 12 --sample-length 5 --data corpus.txt)
two=("$mpiexec" -np 2 --oversubscribe)
# The last row's training loss of a loss.csv.
last_loss() { tail -1 "$1" | cut -d, -f2; }
close() { python3 -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-4 * abs(b))" "$1" "$2"; }

echo "1. one process, then two ranks (data parallel and ZeRO-2): one output, the same losses"
"$train" "${tiny[@]}" --threads 1 --out one >/dev/null 2>&1
for zero in 0 2; do
  "${two[@]}" "$train" "${tiny[@]}" --zero "$zero" --out "two$zero" >"two$zero.out" 2>"two$zero.err" ||
    { cat "two$zero.err"; fail "the two-rank run (--zero $zero) failed"; }
  [ "$(grep -c '^data parallel: 2 ranks' "two$zero.err")" = 1 ] || fail "expected one 'data parallel' line (rank 0's)"
  [ "$(grep -c '^trained 12 steps' "two$zero.out")" = 1 ] || fail "expected one summary (rank 0's)"
  [ "$(wc -l <"two$zero/loss.csv")" = 13 ] || fail "loss.csv should hold a header and 12 rows"
  [ -s "two$zero/checkpoint.safetensors" ] || fail "no checkpoint"
  close "$(last_loss "two$zero/loss.csv")" "$(last_loss one/loss.csv)" ||
    fail "two ranks (--zero $zero) end at $(last_loss "two$zero/loss.csv"), one process at $(last_loss one/loss.csv)"
done

echo "2. stopped under two ranks with ZeRO-1, resumed under two ranks: the same checkpoint"
"${two[@]}" "$train" "${tiny[@]}" --zero 1 --out straight >/dev/null 2>&1
"${two[@]}" "$train" "${tiny[@]}" --zero 1 --stop-after 7 --out split >/dev/null 2>&1
cp split/checkpoint.safetensors at7.safetensors
"${two[@]}" "$train" --resume split/checkpoint.safetensors --zero 1 --out split >/dev/null 2>&1 ||
  fail "the two-rank resume failed"
cmp -s straight/checkpoint.safetensors split/checkpoint.safetensors ||
  fail "the resumed two-rank run's checkpoint differs from the uninterrupted one"

echo "3. the same checkpoint resumed by one process: within float32 rounding"
mkdir alone && cp at7.safetensors alone/checkpoint.safetensors
"$train" --resume alone/checkpoint.safetensors --threads 1 --out alone >/dev/null 2>alone.err ||
  { cat alone.err; fail "the one-process resume of a two-rank ZeRO checkpoint failed"; }
close "$(last_loss alone/loss.csv)" "$(last_loss straight/loss.csv)" ||
  fail "one process resumed ends at $(last_loss alone/loss.csv), two ranks at $(last_loss straight/loss.csv)"
echo "PASS"
