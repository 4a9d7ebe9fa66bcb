#!/usr/bin/env bash
# ctest readme_programs: the README's table of programs (between <!-- programs --> and
# <!-- /programs -->) and the build agree. Every program a row names (`adjoint-...` in its
# first column) was built, under tools/ or examples/ of the build folder, and its source file
# (second column) exists; and every adjoint-* program the build made there has a row.
#   programs_test.sh README.md SOURCE_DIR BUILD_DIR
set -euo pipefail
readme=${1:?usage: programs_test.sh README.md SOURCE_DIR BUILD_DIR}
src=${2:?}
bin=${3:?}

table=$(sed -n '/<!-- programs -->/,/<!-- \/programs -->/p' "$readme")
[ -n "$table" ] || { echo "$readme has no <!-- programs --> table" >&2; exit 1; }
# Rows: | `adjoint-x` | [tools/x.cpp](tools/x.cpp) | what it prints |
mapfile -t names < <(printf '%s\n' "$table" | sed -n 's/^| *`\(adjoint-[a-z0-9-]*\)`.*/\1/p')
[ "${#names[@]}" -gt 0 ] || { echo "the programs table lists no adjoint-* program" >&2; exit 1; }

status=0
for name in "${names[@]}"; do
  if [ -x "$bin/tools/$name" ] || [ -x "$bin/examples/$name" ]; then
    echo "built: $name"
  else
    echo "FAILED: the README lists $name, but no CMake target built it (tools/ or examples/)" >&2
    status=1
  fi
  row=$(printf '%s\n' "$table" | grep -F "\`$name\`" | head -1)
  source=$(printf '%s\n' "$row" | sed -n 's/^|[^|]*| *\[\([^]]*\)\].*/\1/p')
  if [ -z "$source" ] || [ ! -f "$src/$source" ]; then
    echo "FAILED: $name's row names no existing source file (got '$source')" >&2
    status=1
  fi
done

for dir in "$bin/tools" "$bin/examples"; do
  [ -d "$dir" ] || continue
  for exe in "$dir"/adjoint-*; do
    [ -f "$exe" ] && [ -x "$exe" ] || continue
    name=$(basename "$exe")
    if ! printf '%s\n' "${names[@]}" | grep -qxF "$name"; then
      echo "FAILED: $name is built but the README's programs table has no row for it" >&2
      status=1
    fi
  done
done
exit "$status"
