#!/usr/bin/env bash
# Runs each fuzz target for a bounded time: fuzz/run.sh BUILD_DIR SECONDS [TARGET ...]
# (targets: loaders ops import; default all three). New inputs go to BUILD_DIR/fuzz-work/TARGET/corpus,
# which persists between runs; the seeds in fuzz/corpus/TARGET are read, never written.
# A crash, leak, timeout or sanitizer report stops the target and fails the script; the
# input is saved as BUILD_DIR/fuzz-work/TARGET/artifacts/crash-* (see docs/fuzzing.md).
# Extra libFuzzer flags: FUZZ_FLAGS="-jobs=2 -workers=2" fuzz/run.sh ...
set -euo pipefail
cd "$(dirname "$0")/.."
build=$1
seconds=$2
shift 2
targets=("$@")
((${#targets[@]})) || targets=(loaders ops import)

# Sanitizer reports with stacks; leaks are checked (libFuzzer's -detect_leaks=1). A request
# for more memory than exists (a [2^42, 4] tensor) must reach the library as a failed
# allocation, which it reports as an OutOfMemory error, instead of ASan aborting on it.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

status=0
for t in "${targets[@]}"; do
  exe="$build/fuzz/fuzz_$t"
  [ -x "$exe" ] || { echo "fuzz: $exe is not built (make fuzz-build)" >&2; exit 2; }
  work="$build/fuzz-work/$t"
  mkdir -p "$work/corpus" "$work/artifacts"
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  echo "fuzz: $t for ${seconds}s (corpus $work/corpus + fuzz/corpus/$t)"
  # -timeout: one input running past 10 s is a finding (a hang); -rss_limit_mb: so is 2 GB.
  if ! "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -print_funcs=0 \
      -artifact_prefix="$work/artifacts/" "${dict[@]}" ${FUZZ_FLAGS:-} \
      "$work/corpus" "fuzz/corpus/$t" >"$work/log.txt" 2>&1; then
    status=1
    echo "fuzz: $t FOUND A PROBLEM; the end of $work/log.txt:" >&2
    grep -v '^#[0-9]' "$work/log.txt" | tail -60 >&2
    ls -t "$work/artifacts" | head -3 | sed "s|^|fuzz: saved $work/artifacts/|" >&2
    continue
  fi
  grep -E '^(#[0-9]+.*DONE|stat::)' "$work/log.txt" | sed "s/^/fuzz: $t: /"
done
exit $status
