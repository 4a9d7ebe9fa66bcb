#!/usr/bin/env bash
# adjoint-train's gradient health, end to end on a tiny model: grads.csv and grads.svg hold a
# record every --grad-every steps (none with 0); a learning rate that blows up stops the run
# with exit status 1 and an error naming the parameter whose gradient went NaN; thresholds set
# on purpose make the explode and vanish warnings appear, naming the layer and step.
#   trainer_health_test.sh path/to/adjoint-train
set -euo pipefail
train=$(realpath "$1")
work=$(mktemp -d "${TMPDIR:-/tmp}/adjoint_train_health.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

fail() { echo "FAIL: $*" >&2; exit 1; }
for i in $(seq 600); do echo "line $i: the quick brown fox jumps over the lazy dog, $((i * 7919 % 1000))."; done >corpus.txt
tiny=(--layers 1 --width 16 --heads 2 --context 16 --batch 4 --eval-every 10
      --sample-length 5 --data corpus.txt --steps 20)

echo "1. by default a record every 10 steps: grads.csv and grads.svg"
"$train" "${tiny[@]}" --out plain >out.txt 2>err.txt || fail "run failed: $(cat err.txt)"
grep -q "plain/grads.svg" out.txt || fail "grads.svg not reported: $(cat out.txt)"
grep -q "log10 gradient norm" plain/grads.svg || fail "grads.svg has no gradient panel"
[ "$(head -1 plain/grads.csv)" = "step,parameter,layer,grad_norm,weight_norm,update_norm,update_ratio" ] ||
  fail "grads.csv header: $(head -1 plain/grads.csv)"
[ "$(cut -d, -f1 plain/grads.csv | tail -n +2 | sort -u | tr '\n' ' ')" = "10 20 " ] ||
  fail "grads.csv steps: $(cut -d, -f1 plain/grads.csv | sort -u | tr '\n' ' ')"
grep -q "^10,blocks.0.attn.qkv.weight,blocks.0," plain/grads.csv || fail "no qkv row"
! grep -q "warning:" err.txt || fail "a healthy run warned: $(grep warning: err.txt)"

echo "2. --grad-every 0 records nothing"
"$train" "${tiny[@]}" --grad-every 0 --out none >out.txt 2>err.txt || fail "run failed: $(cat err.txt)"
[ ! -e none/grads.svg ] && [ ! -e none/grads.csv ] || fail "--grad-every 0 wrote grads files"

echo "3. a learning rate that blows up: a named error on the NaN gradient, exit status 1"
rc=0
"$train" "${tiny[@]}" --lr 1e5 --warmup 1 --grad-every 1 --out blow >/dev/null 2>err.txt || rc=$?
[ "$rc" = 1 ] || fail "exit status $rc, expected 1: $(cat err.txt)"
grep -q "error: \[train\] step [0-9]*: the gradient of wte.weight \[256, 16\] (float32) holds [0-9]* NaN" err.txt ||
  fail "$(cat err.txt)"
[ -s blow/grads.csv ] || fail "the records before the NaN were not written"

echo "3b. the same with --detect-anomaly: stopped at the backward node that made the NaN"
rc=0
"$train" "${tiny[@]}" --lr 1e5 --warmup 1 --grad-every 1 --detect-anomaly --out blow2 >/dev/null 2>err.txt || rc=$?
[ "$rc" = 1 ] || fail "exit status $rc, expected 1: $(cat err.txt)"
grep -q "error: \[backward\] anomaly: [A-Za-z]*Backward returned a gradient for its input [0-9] with [0-9]* nan" err.txt ||
  fail "$(cat err.txt)"
grep -q "called at tools/gpt_trainer.cpp:[0-9]* (in .*train_step.*) in module blocks\.0\." err.txt ||
  fail "no creation site in: $(cat err.txt)"

echo "4. explode and vanish warnings name the layer and the step"
"$train" "${tiny[@]}" --grad-vanish 0 --grad-explode 1e-9 --out explode >/dev/null 2>err.txt ||
  fail "run failed: $(cat err.txt)"
grep -q "warning: step 10: the gradients of layer 'blocks.0' explode: norm .* above 1e-09" err.txt ||
  fail "$(cat err.txt)"
[ "$(grep -c "layer 'blocks.0' explode" err.txt)" = 1 ] || fail "explode warned more than once"
"$train" "${tiny[@]}" --grad-every 5 --grad-vanish 1e9 --grad-explode 1e10 \
  --grad-vanish-records 2 --out vanish >/dev/null 2>err.txt || fail "run failed: $(cat err.txt)"
grep -q "warning: step 10: the gradients of layer 'ln_f' vanish: norm below 1e+09 for 2 records in a row" err.txt ||
  fail "$(cat err.txt)"
! grep -q "warning: step 5:" err.txt || fail "vanish warned after one record"
echo "all passed"
