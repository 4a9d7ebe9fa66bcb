#!/usr/bin/env bash
# Which files outside the dispatch stack's layers read vmap or trace state (docs/architecture.md,
# "Ops without derivatives"): every read of vmap_depth, batch_level, tracing(), tracing_writes()
# or tls_op_tracer in src/ops, src/autograd and src/core. Fails when such a read appears in a
# file that is not listed below, or when a listed file has none left, so that the list only
# shrinks as the sites move into the layers (issue 37's total stack). Also fails on an include
# cycle between src/dispatch, src/autograd and src/vmap.
#   tests/layers/stack_state_test.sh REPO_ROOT
set -euo pipefail
cd "${1:-.}"

# Where the state itself lives: its definitions, not reads that choose a path.
declare -A defines=(
  [src/core/mode_state.h]="ModeState::vmap_depth, beside the layer bits"
  [src/core/op_tracer.h]="the tracer's interface and tracing()"
  [src/core/grad_mode.cpp]="the definition of tls_op_tracer"
)
# Known sites, each with why it is still there.
declare -A known=(
)

pattern='vmap_depth|batch_level\(|batched_pointwise|tracing\(\)|tracing_writes\(\)|tls_op_tracer'
mapfile -t found < <(grep -rlE "$pattern" src/ops src/autograd src/core --include='*.cpp' --include='*.h' | sort)
if ((${#found[@]} == 0)); then
  echo "no file reads vmap or trace state: the grep found nothing, is this the repository root?" >&2
  exit 1
fi

status=0
declare -A seen=()
for f in "${found[@]}"; do
  seen[$f]=1
  [[ -n "${defines[$f]:-}" || -n "${known[$f]:-}" ]] && continue
  echo "NEW: $f reads vmap or trace state outside the layers:" >&2
  grep -nE "$pattern" "$f" | sed 's/^/    /' >&2
  status=1
done
for f in "${!known[@]}" "${!defines[@]}"; do
  if [[ -z "${seen[$f]:-}" ]]; then
    echo "GONE: $f no longer reads vmap or trace state; take it off the list in $0" >&2
    status=1
  fi
done
((status == 0)) && echo "vmap or trace state is read by the layers' files and ${#known[@]} known sites"

# No include cycle between the stack's directories: the arrows go autograd -> dispatch -> vmap
# (and autograd -> vmap), never back.
declare -A edge=()
for from in dispatch autograd vmap; do
  for to in dispatch autograd vmap; do
    [[ $from == "$to" ]] && continue
    if grep -lq "#include \"$to/" src/$from/* 2>/dev/null; then edge[$from,$to]=1; fi
  done
done
for a in dispatch autograd vmap; do
  for b in dispatch autograd vmap; do
    [[ $a == "$b" ]] && continue
    if [[ $a < $b && -n "${edge[$a,$b]:-}" && -n "${edge[$b,$a]:-}" ]]; then
      echo "CYCLE: src/$a and src/$b include each other:" >&2
      grep -l "#include \"$b/" src/$a/* | sed "s|^|    includes $b/: |" >&2
      grep -l "#include \"$a/" src/$b/* | sed "s|^|    includes $a/: |" >&2
      status=1
    fi
    for c in dispatch autograd vmap; do
      [[ $c == "$a" || $c == "$b" ]] && continue
      if [[ -n "${edge[$a,$b]:-}" && -n "${edge[$b,$c]:-}" && -n "${edge[$c,$a]:-}" ]]; then
        echo "CYCLE: src/$a -> src/$b -> src/$c -> src/$a" >&2
        status=1
      fi
    done
  done
done
((status == 0)) && echo "no include cycle between src/dispatch, src/autograd and src/vmap"
exit $status
