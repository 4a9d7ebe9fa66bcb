#!/usr/bin/env bash
# adjoint-train under SIGKILL: a tiny model trains with --save-every N and is killed KILLS
# times at random moments (restarted with --resume after each kill, from scratch while there
# is no checkpoint yet). Checks that each kill loses at most N steps (the last loss.csv row
# minus the checkpoint's step), that loss.csv is never behind the checkpoint, that no
# temporary file outlives the next start, and that the resumed run ends with the very
# checkpoint and loss.csv of an uninterrupted run. Prints the measured numbers.
#   trainer_kill_test.sh path/to/adjoint-train [KILLS=20] [N=10] [SEED]
set -euo pipefail
train=$(realpath "$1")
kills=${2:-20}
every=${3:-10}
RANDOM=${4:-$$}
work=$(mktemp -d "${TMPDIR:-/tmp}/adjoint_train_kill.XXXXXX")
trap 'kill -9 $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }
for i in $(seq 600); do echo "line $i: the quick brown fox jumps over the lazy dog, $((i * 7919 % 1000))."; done >corpus.txt
run=(--layers 1 --width 16 --heads 2 --context 16 --batch 4 --warmup 20 --eval-every 50
     --sample-length 5 --data corpus.txt --steps 16000 --save-every "$every")
ckpt=out/checkpoint.safetensors
meta() { grep -ao "\"$2\":\"[^\"]*\"" "$1" | head -1 | cut -d'"' -f4; }
# A kill may come before the run has made out/ or written a row (a slow build, a loaded
# machine): both helpers then print nothing rather than fail (pipefail would end the script).
last_row() { tail -n +2 out/loss.csv 2>/dev/null | grep -a '^[0-9]*,.*$' | tail -1 | cut -d, -f1 || true; }
temporaries() { find out -name '*.tmp.*' 2>/dev/null || true; }
trap 'echo "FAIL: line $LINENO: $BASH_COMMAND" >&2' ERR

"$train" "${run[@]}" --out straight >/dev/null 2>&1 || fail "the uninterrupted run failed"

killed=0 max_lost=0 max_temps=0
: >temps.txt
while [ "$killed" -lt "$kills" ]; do
  args=("${run[@]}")
  [ -f "$ckpt" ] && args=(--resume "$ckpt")  # the flags come from the checkpoint
  "$train" "${args[@]}" --out out >/dev/null 2>>log.txt &
  pid=$!
  # 0.02 to 0.15 s: startup, steps, saves. Short enough that 20 kills stay well inside the
  # run on a fast machine (about 200 steps per kill against 16000 / 20).
  sleep "$(printf '0.%03d' $((RANDOM % 130 + 20)))"
  kill -9 "$pid" 2>/dev/null || true
  rc=0
  wait "$pid" 2>/dev/null || rc=$?
  # 137 = 128 + SIGKILL: anything else means the run ended by itself before the kill.
  [ "$rc" != 0 ] || fail "the run finished before $kills kills; give it more --steps"
  [ "$rc" = 137 ] || fail "a run failed with status $rc: $(tail -3 log.txt)"
  killed=$((killed + 1))
  step=$(last_row)
  step=${step:-0}
  saved=0
  [ -f "$ckpt" ] && saved=$(meta "$ckpt" step)
  [ "$step" -ge "$saved" ] || fail "kill $killed: loss.csv at step $step, behind the checkpoint ($saved)"
  lost=$((step - saved))
  [ "$lost" -le "$every" ] || fail "kill $killed: lost $lost steps (> $every)"
  [ "$lost" -gt "$max_lost" ] && max_lost=$lost
  # A temporary stays until the next start removes it: count each name once.
  temps=$(temporaries | wc -l)
  temporaries >>temps.txt
  [ "$temps" -gt "$max_temps" ] && max_temps=$temps
  echo "kill $killed: at step $step, checkpoint at step $saved, lost $lost, temporaries $temps"
done

"$train" --resume "$ckpt" --out out >/dev/null 2>>log.txt || fail "the final resume failed"
left=$(find out -name '*.tmp.*' | wc -l)
temps_seen=$(sort -u temps.txt | wc -l)
[ "$left" = 0 ] || fail "temporaries left: $(find out -name '*.tmp.*')"
cmp straight/checkpoint.safetensors "$ckpt" || fail "the final checkpoint differs from an uninterrupted run's"
cmp straight/loss.csv out/loss.csv || fail "loss.csv differs from an uninterrupted run's"
echo "kills $killed, max lost steps $max_lost (--save-every $every), temporaries left by kills $temps_seen (at most $max_temps at once), left at the end $left; final checkpoint and loss.csv identical to an uninterrupted run"
echo "PASS"
