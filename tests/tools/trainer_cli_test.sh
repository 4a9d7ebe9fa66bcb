#!/usr/bin/env bash
# adjoint-train end to end, on a tiny model: a run stopped with --stop-after and resumed with
# --resume alone writes the same checkpoint (byte for byte) and loss.csv as an uninterrupted
# run; a resume with a contradicting flag, and one from corrupt metadata, exit 1 with a named
# error (no terminate()); a SIGKILLed run keeps its loss.csv rows, and its resume drops the
# rows past the checkpoint instead of logging those steps twice; --profile N writes step N's
# trace and table without changing the run; a numeric flag out of range exits 1 at once with
# an error naming it; a resume without --threads keeps the checkpoint's count; the ETA of a
# run of 10^15 steps reads in years, not as a negative overflow.
#   trainer_cli_test.sh path/to/adjoint-train
set -euo pipefail
train=$(realpath "$1")
work=$(mktemp -d "${TMPDIR:-/tmp}/adjoint_train_cli.XXXXXX")
trap 'kill -9 $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }
for i in $(seq 600); do echo "line $i: the quick brown fox jumps over the lazy dog, $((i * 7919 % 1000))."; done >corpus.txt
tiny=(--layers 1 --width 16 --heads 2 --context 16 --batch 4 --warmup 3 --eval-every 5
      --sample-length 5 --data corpus.txt)
# The checkpoint's metadata value of key $2 in file $1 (the header is plain JSON).
meta() { grep -ao "\"$2\":\"[^\"]*\"" "$1" | head -1 | cut -d'"' -f4; }
# Rewrites checkpoint $1 into $2 with metadata key $3 set to $4.
set_meta() {
  python3 - "$@" <<'EOF'
import json, struct, sys
src, dst, key, value = sys.argv[1:]
data = open(src, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
header["__metadata__"][key] = value
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
open(dst, "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
EOF
}

echo "1. --stop-after 17 then --resume: the uninterrupted run's checkpoint and loss.csv"
"$train" "${tiny[@]}" --steps 30 --out straight >/dev/null 2>&1
"$train" "${tiny[@]}" --steps 30 --stop-after 17 --out split >/dev/null 2>&1
[ "$(meta split/checkpoint.safetensors step)" = 17 ] || fail "--stop-after 17 did not save step 17"
"$train" --resume split/checkpoint.safetensors --out split >/dev/null 2>split.err ||
  fail "resume failed: $(cat split.err)"
cmp straight/checkpoint.safetensors split/checkpoint.safetensors || fail "checkpoints differ"
cmp straight/loss.csv split/loss.csv || fail "loss.csv differs"

echo "1b. the same under --precision fp16 across skipped steps (an initial loss scale that overflows)"
fp16=(--precision fp16 --loss-scale 1e8)
"$train" "${tiny[@]}" "${fp16[@]}" --steps 30 --out straight16 >/dev/null 2>&1
"$train" "${tiny[@]}" "${fp16[@]}" --steps 30 --stop-after 17 --out split16 >/dev/null 2>&1
skipped=$(meta split16/checkpoint.safetensors skipped_steps)
[ "$skipped" -gt 5 ] && [ "$skipped" -lt 17 ] || fail "expected some skipped steps by step 17, got '$skipped'"
"$train" --resume split16/checkpoint.safetensors --out split16 >/dev/null 2>split16.err ||
  fail "fp16 resume failed: $(cat split16.err)"
cmp straight16/checkpoint.safetensors split16/checkpoint.safetensors || fail "fp16 checkpoints differ"
cmp straight16/loss.csv split16/loss.csv || fail "fp16 loss.csv differs"
rc=0
"$train" --resume split16/checkpoint.safetensors --precision bf16 --out split16 >/dev/null 2>err.txt || rc=$?
[ "$rc" = 1 ] || fail "a resume with another --precision: exit status $rc, expected 1"
grep -q -- "--precision is fp16 in the checkpoint but bf16 was given" err.txt || fail "$(cat err.txt)"

echo "1c. --precision bf16 --master-weights: bfloat16 weights in the checkpoint, the same resume"
mw=(--precision bf16 --master-weights)
"$train" "${tiny[@]}" "${mw[@]}" --steps 30 --out straightmw >/dev/null 2>&1
"$train" "${tiny[@]}" "${mw[@]}" --steps 30 --stop-after 17 --out splitmw >/dev/null 2>&1
[ "$(meta splitmw/checkpoint.safetensors master_weights)" = 1 ] || fail "no master_weights in the metadata"
grep -aq '"wte.weight":{"dtype":"BF16"' splitmw/checkpoint.safetensors ||
  fail "the weights are not stored as BF16"
"$train" --resume splitmw/checkpoint.safetensors --out splitmw >/dev/null 2>splitmw.err ||
  fail "master-weights resume failed: $(cat splitmw.err)"
cmp straightmw/checkpoint.safetensors splitmw/checkpoint.safetensors || fail "master-weights checkpoints differ"
cmp straightmw/loss.csv splitmw/loss.csv || fail "master-weights loss.csv differs"
rc=0
"$train" --resume split/checkpoint.safetensors --precision fp32 --master-weights --out split >/dev/null 2>err.txt || rc=$?
[ "$rc" = 1 ] || fail "a resume adding --master-weights: exit status $rc, expected 1"
grep -q -- "--master-weights is off in the checkpoint but on was given" err.txt || fail "$(cat err.txt)"

echo "2. a resume whose --steps contradicts the checkpoint is refused"
"$train" "${tiny[@]}" --steps 12 --out short >/dev/null 2>&1
rc=0
"$train" "${tiny[@]}" --resume short/checkpoint.safetensors --steps 30 --out short \
  >/dev/null 2>err.txt || rc=$?
[ "$rc" = 1 ] || fail "exit status $rc, expected 1"
grep -q -- "--steps is 12 in the checkpoint but 30 was given" err.txt || fail "$(cat err.txt)"

echo "3. corrupt metadata: a named error and exit status 1, never terminate()"
for kv in "data_gen.s0=abc" "data_gen.s0=99999999999999999999999" "step=-5" "lr=nan"; do
  key=${kv%%=*} value=${kv#*=}
  set_meta short/checkpoint.safetensors bad.safetensors "$key" "$value"
  rc=0
  "$train" --resume bad.safetensors --out short >/dev/null 2>err.txt || rc=$?
  [ "$rc" = 1 ] || fail "$kv: exit status $rc, expected 1: $(cat err.txt)"
  grep -q "error: \[train\] 'bad.safetensors': metadata '$key' is \"$value\"; expected" err.txt ||
    fail "$kv: $(cat err.txt)"
  ! grep -q terminate err.txt || fail "$kv: $(cat err.txt)"
done

echo "4. SIGKILL: loss.csv keeps its rows; the resume drops those past the checkpoint"
"$train" "${tiny[@]}" --steps 100000 --save-every 7 --out killed >/dev/null 2>&1 &
pid=$!
for i in $(seq 600); do
  [ -f killed/checkpoint.safetensors ] && [ "$(wc -l <killed/loss.csv)" -gt 30 ] && break
  sleep 0.05
done
kill -9 $pid
wait $pid 2>/dev/null || true
rows=$(grep -c '^[0-9]' killed/loss.csv || true)
saved=$(meta killed/checkpoint.safetensors step)
[ "$rows" -ge 30 ] || fail "loss.csv has $rows rows after the kill"
[ "$rows" -ge "$saved" ] || fail "loss.csv ($rows rows) is behind the checkpoint (step $saved)"
"$train" --resume killed/checkpoint.safetensors --stop-after $((saved + 3)) --out killed \
  >/dev/null 2>&1 || fail "resume after the kill failed"
[ "$(tail -n +2 killed/loss.csv | cut -d, -f1 | tr '\n' ' ')" = "$(seq -s ' ' 1 $((saved + 3))) " ] ||
  fail "loss.csv steps are not 1..$((saved + 3)) once each"
[ -z "$(find . -name '*.tmp.*')" ] || fail "temporary files left: $(find . -name '*.tmp.*')"

echo "5. --profile 3: step 3's trace (trace-event JSON) and table, and the same training"
"$train" "${tiny[@]}" --steps 4 --out plain >/dev/null 2>&1
"$train" "${tiny[@]}" --steps 4 --profile 3 --out profiled >/dev/null 2>profiled.err ||
  fail "--profile failed: $(cat profiled.err)"
cmp plain/checkpoint.safetensors profiled/checkpoint.safetensors || fail "profiling changed the run"
grep -q "^LinearBackward  *backward" profiled/profile.txt || fail "profile.txt: $(cat profiled/profile.txt)"
python3 - profiled/trace.json <<'EOF' || fail "trace.json is not a trace of one step"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
names = {e["name"] for e in events}
assert {"linear", "LinearBackward", "cross_entropy"} <= names, names
for e in events:
    assert e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0, e
    assert e["cat"] in ("forward", "backward"), e
# one step: each linear layer once forward and once backward
assert sum(e["name"] == "linear" for e in events) == sum(e["name"] == "LinearBackward" for e in events)
EOF
echo "6. a numeric flag out of range: exit 1 before any step, naming the flag and its value"
for args in "--min-lr -1|--min-lr must be a finite number >= 0, got -1" \
            "--lr nan|--lr must be a finite number >= 0, got nan" \
            "--lr 1e-4 --min-lr 1e-3|--min-lr 0.001 is above --lr 0.0001" \
            "--save-every -2|--save-every must be an integer >= 0, got -2" \
            "--grad-vanish-records 0|--grad-vanish-records must be a positive integer, got 0"; do
  flags=${args%%|*} want=${args#*|}
  rc=0
  # shellcheck disable=SC2086
  "$train" "${tiny[@]}" --steps 3 $flags --out badflag >/dev/null 2>err.txt || rc=$?
  [ "$rc" = 1 ] || fail "$flags: exit status $rc, expected 1: $(cat err.txt)"
  grep -qF -- "error: [train] $want" err.txt || fail "$flags: $(cat err.txt)"
  [ ! -e badflag ] || fail "$flags: the run started (wrote badflag/)"
done
rc=0  # refused by the parser (its own exit status), where it used to wrap to 2^64 - 1
"$train" "${tiny[@]}" --steps 3 --seed -1 --out badflag >/dev/null 2>err.txt || rc=$?
[ "$rc" != 0 ] && grep -qF -- "--seed: must be an integer >= 0, got -1" err.txt ||
  fail "--seed -1: exit status $rc: $(cat err.txt)"
[ ! -e badflag ] || fail "--seed -1: the run started"
"$train" "${tiny[@]}" --steps 3 --lr 1e-4 --out lowlr >/dev/null 2>err.txt ||
  fail "--lr below the default --min-lr: $(cat err.txt)"
[ "$(meta lowlr/checkpoint.safetensors min_lr)" = 1e-04 ] || fail "--min-lr did not follow --lr down"

echo "7. --resume without --threads keeps the checkpoint's thread count (the same bytes)"
"$train" "${tiny[@]}" --steps 12 --threads 1 --out straight1 >/dev/null 2>&1
"$train" "${tiny[@]}" --steps 12 --threads 1 --stop-after 6 --out split1 >/dev/null 2>&1
"$train" --resume split1/checkpoint.safetensors --out split1 >/dev/null 2>split1.err ||
  fail "resume failed: $(cat split1.err)"
grep -q "resumed from split1/checkpoint.safetensors at step 6 of 12 with 1 thread" split1.err ||
  fail "the resume did not keep 1 thread: $(cat split1.err)"
! grep -q "note: the checkpoint was written with" split1.err || fail "$(cat split1.err)"
[ "$(meta split1/checkpoint.safetensors threads)" = 1 ] || fail "the resumed run's checkpoint records another count"
cmp straight1/checkpoint.safetensors split1/checkpoint.safetensors || fail "checkpoints differ"

echo "8. the ETA of 10^15 steps: years, never a negative overflow"
"$train" "${tiny[@]}" --steps 1000000000000000 --out eta >/dev/null 2>eta.err &
pid=$!
for i in $(seq 600); do grep -q "ETA" eta.err && break; sleep 0.05; done
sleep 0.5
kill -9 $pid 2>/dev/null || fail "the run ended early: $(cat eta.err)"
wait $pid 2>/dev/null || true
eta=$(tr '\r' '\n' <eta.err | grep -o "ETA [^ ]*" | tail -1)
echo "$eta" | grep -Eq '^ETA [0-9]+y$' || fail "ETA reads '$eta'"

echo "PASS"
