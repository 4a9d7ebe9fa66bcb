#!/usr/bin/env bash
# adjoint-sequence end to end, tiny: it trains both models (the losses fall), writes
# gradients.svg with both models' series (trained and at init) and grad_norms.csv, whose norms
# are finite and positive, and far from the loss the trained tanh RNN's gradient falls faster
# than the LSTM's (the decay rate it prints, recomputed here from the CSV). A bad flag is a
# named error with exit status 1.
#   sequence_tool_test.sh path/to/adjoint-sequence
set -euo pipefail
tool=$(realpath "$1")
work=$(mktemp -d "${TMPDIR:-/tmp}/adjoint_sequence.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
for i in $(seq 400); do echo "line $i: the quick brown fox jumps over the lazy dog, $((i * 7919 % 1000))."; done >corpus.txt

echo "1. a tiny run writes the picture and the norms"
"$tool" --tiny --data corpus.txt --out run >out.txt 2>err.txt || fail "run failed: $(cat err.txt)"
grep -q "wrote run/gradients.svg and run/grad_norms.csv" out.txt || fail "$(cat out.txt)"
for s in "tanh RNN, trained" "LSTM, trained" "tanh RNN, at init" "LSTM, at init"; do
  grep -q "$s" run/gradients.svg || fail "series $s is missing"
done
[ "$(head -1 run/grad_norms.csv)" = "distance,rnn_grad_norm,lstm_grad_norm,rnn_init_grad_norm,lstm_init_grad_norm" ] || fail "csv header"
[ "$(tail -n +2 run/grad_norms.csv | wc -l)" = 60 ] || fail "expected 60 distances (--tiny's length)"
for model in lstm rnn; do
  first=$(grep "^$model step 5/" out.txt | sed 's/.*loss \([0-9.]*\).*/\1/')
  last=$(grep "^$model step 15/" out.txt | sed 's/.*loss \([0-9.]*\).*/\1/')
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || fail "$model loss $first -> $last"
done

echo "2. the norms are finite and positive, and the RNN's fall faster far from the loss"
# every value a number as printf's %e writes it (not inf or nan) and above zero
awk -F, 'NR > 1 { for (i = 2; i <= 5; ++i) if ($i !~ /^[0-9]\.[0-9]+e[-+][0-9]+$/ || $i + 0 <= 0) bad = 1 }
  END { exit bad }' \
  run/grad_norms.csv || fail "a norm is not finite and positive: $(cat run/grad_norms.csv)"
# decades lost per step from distance 29 to 59, as the tool prints them
rates=$(awk -F, 'NR == 31 { r0 = $2; l0 = $3 } NR == 61 { r1 = $2; l1 = $3 }
  END { printf "%.6f %.6f", (log(r0) - log(r1)) / log(10) / 30, (log(l0) - log(l1)) / log(10) / 30 }' \
  run/grad_norms.csv)
read -r rnn_rate lstm_rate <<<"$rates"
awk -v r="$rnn_rate" -v l="$lstm_rate" 'BEGIN { exit !(r > l && r > 0) }' ||
  fail "rnn decays $rnn_rate, lstm $lstm_rate decades per step"
printed=$(grep "decay far from the loss" out.txt | sed 's/.*rnn \([0-9.]*\),.*/\1/')
awk -v p="$printed" -v r="$rnn_rate" 'BEGIN { d = p - 10 * r; exit !(d < 0.01 && d > -0.01) }' ||
  fail "printed rnn rate $printed vs $rnn_rate per step from the csv"
grep -q "the layer saves for backward per time step" out.txt || fail "no saved bytes line"

echo "3. a bad flag is a named error"
rc=0
"$tool" --tiny --data corpus.txt --steps 0 --out bad >/dev/null 2>err.txt || rc=$?
[ "$rc" = 1 ] || fail "exit status $rc"
grep -q "\[adjoint-sequence\] --steps" err.txt || fail "$(cat err.txt)"
echo "all passed"
