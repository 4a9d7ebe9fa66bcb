#!/usr/bin/env bash
# ctest test_readme: runs each whole program among the README's code blocks (built by
# tests/readme/readme_blocks.cmake) and fails if one fails. Their output is shown.
set -uo pipefail
[ "$#" -gt 0 ] || { echo "no programs given: the README has no whole program to run" >&2; exit 1; }
failed=0
for p in "$@"; do
  echo "== $(basename "$p")"
  if ! "$p"; then
    echo "FAILED: $p" >&2
    failed=1
  fi
done
exit "$failed"
