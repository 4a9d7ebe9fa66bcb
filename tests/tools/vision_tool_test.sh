#!/usr/bin/env bash
# adjoint-vision end to end on a tiny synthetic Fashion-MNIST that the test writes (gzip IDX
# files: each class a bright square at its own place): a run prints its test accuracy and
# writes the pictures; a run stopped and resumed ends with the same checkpoint and loss log,
# byte for byte, as the uninterrupted run; a missing or truncated file and a bad flag are named
# errors with a non-zero exit status that write nothing.
#   vision_tool_test.sh path/to/adjoint-vision
set -euo pipefail
tool=$(realpath "$1")
work=$(mktemp -d "${TMPDIR:-/tmp}/adjoint_vision.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

python3 - <<'EOF'
import gzip, os, random, struct
random.seed(0)
os.makedirs("data", exist_ok=True)
def write(split, n):
    images, labels = bytearray(), bytearray()
    for _ in range(n):
        k = random.randrange(10)
        img = [random.randrange(60) for _ in range(784)]
        r0, c0 = (k // 4) * 9 + 1, (k % 4) * 7
        for r in range(r0, r0 + 6):
            for c in range(c0, c0 + 6):
                img[r * 28 + c] = 230
        images += bytes(img)
        labels.append(k)
    with gzip.open(f"data/{split}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">BBBBIII", 0, 0, 8, 3, n, 28, 28) + images)
    with gzip.open(f"data/{split}-labels-idx1-ubyte.gz", "wb") as f:
        f.write(struct.pack(">BBBBI", 0, 0, 8, 1, n) + labels)
write("train", 1280)
write("t10k", 200)
EOF
sizes=(--channels 4,8 --blocks 1,2 --batch 32 --warmup 4 --threads 2)
small=(--data data "${sizes[@]}")

echo "1. a run prints its accuracy and writes the pictures"
"$tool" "${small[@]}" --epochs 2 --out run >out.txt 2>err.txt || fail "run failed: $(cat err.txt)"
grep -q "^epoch 2: training loss" out.txt || fail "no epoch line: $(cat out.txt)"
acc=$(grep "^test accuracy" out.txt | sed 's/test accuracy \([0-9.]*\).*/\1/')
[ -n "$acc" ] || fail "no test accuracy line: $(cat out.txt)"
awk -v a="$acc" 'BEGIN { exit !(a > 0.5) }' || fail "accuracy $acc on squares"
tail -1 out.txt | grep -q "^wrote run/loss.svg, run/accuracy.svg, run/confusion.svg, run/grads.svg" ||
  fail "last line: $(tail -1 out.txt)"
for f in loss.svg accuracy.svg confusion.svg grads.svg grads.csv loss.csv checkpoint.safetensors; do
  [ -s "run/$f" ] || fail "run/$f is missing"
done
grep -q "</svg>" run/confusion.svg || fail "confusion.svg is cut short"
grep -q "test accuracy" run/accuracy.svg || fail "accuracy.svg has no test series"
grep -q "stages.0" run/grads.csv || fail "grads.csv has no per-layer rows"
[ "$(tail -n +2 run/loss.csv | wc -l)" = 80 ] || fail "loss.csv: expected 80 steps"
grep -q "\[=*" err.txt || fail "no progress bar"
# the confusion matrix's counts (the numbers in its cells) add up to the 200 test images
total=$(grep -o '>[0-9]*</text>' run/confusion.svg | tr -dc '0-9\n' | awk '{ s += $1 } END { print s }')
[ "$total" = 200 ] || fail "confusion matrix sums to $total"

echo "2. stopped at step 50 and resumed equals the uninterrupted run, byte for byte"
"$tool" "${small[@]}" --epochs 2 --out part --stop-after 50 >out2.txt 2>/dev/null || fail "stop"
grep -q "stopped at step 50 of 80; continue with --resume part/checkpoint.safetensors" out2.txt ||
  fail "$(cat out2.txt)"
"$tool" "${small[@]}" --epochs 2 --out part --resume part/checkpoint.safetensors >out3.txt 2>/dev/null ||
  fail "resume"
grep -q "resumed at step 50" out3.txt || fail "$(cat out3.txt)"
cmp part/checkpoint.safetensors run/checkpoint.safetensors || fail "checkpoints differ"
cmp part/loss.csv run/loss.csv || fail "loss logs differ"
[ "$(grep '^test accuracy' out3.txt)" = "$(grep '^test accuracy' out.txt)" ] || fail "accuracy differs"
rc=0
"$tool" "${small[@]}" --epochs 2 --lr 0.05 --out part --resume part/checkpoint.safetensors \
  >/dev/null 2>err.txt || rc=$?
[ "$rc" = 1 ] && grep -q -- "--lr 0.10000000000000001, this run has --lr 0.05" err.txt ||
  fail "another run resumed: $rc $(cat err.txt)"

echo "3. a missing or truncated file and a bad flag are named errors that write nothing"
rc=0
"$tool" --data nowhere --out bad >/dev/null 2>err.txt || rc=$?
[ "$rc" = 1 ] && grep -q "nowhere/train-images-idx3-ubyte.gz" err.txt || fail "missing: $rc $(cat err.txt)"
[ ! -e bad ] || fail "a failed run made its output folder"
mkdir cut && cp data/* cut/
python3 -c "import gzip; d = gzip.open('data/t10k-images-idx3-ubyte.gz').read(); gzip.open('cut/t10k-images-idx3-ubyte.gz', 'wb').write(d[:5000])"
rc=0
"$tool" "${sizes[@]}" --data cut --out bad >/dev/null 2>err.txt || rc=$?
[ "$rc" = 1 ] && grep -q "cut/t10k-images-idx3-ubyte.gz" err.txt && grep -q truncated err.txt ||
  fail "truncated: $rc $(cat err.txt)"
[ ! -e bad ] || fail "a failed run made its output folder"
rc=0
"$tool" "${small[@]}" --precision fp8 --out bad >/dev/null 2>err.txt || rc=$?
[ "$rc" = 1 ] && grep -q -- "--precision must be fp32 or bf16" err.txt || fail "fp8: $rc $(cat err.txt)"
[ ! -e bad ] || fail "a failed run made its output folder"
echo "PASS"
