#!/usr/bin/env bash
# ctest docs_index: every page of docs/ is reachable from the index, and the links resolve.
# Checks that each docs/*.md (but the index itself) is linked from docs/README.md, that every
# relative link of README.md and of each docs/*.md names a file or folder that exists, and
# that a link's #anchor, where it has one, matches a heading of the page it names (GitHub's
# rule: lower case, spaces to dashes, punctuation dropped).
#   docs_index_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: docs_index_test.sh SOURCE_DIR}
cd "$src"
status=0

[ -f docs/README.md ] || { echo "FAILED: docs/README.md (the index) is missing" >&2; exit 1; }
for page in docs/*.md; do
  name=$(basename "$page")
  [ "$name" = README.md ] && continue
  if ! grep -qE "\]\((\./)?$name(#[^)]*)?\)" docs/README.md; then
    echo "FAILED: docs/$name is not linked from docs/README.md" >&2
    status=1
  fi
done

anchors() {  # the GitHub anchors of a markdown file's headings, one a line
  grep -E '^#{1,6} ' "$1" | sed -E 's/^#+ +//' | tr '[:upper:]' '[:lower:]' |
    sed -E 's/`//g; s/[^a-z0-9 _-]//g; s/ /-/g'
}

for file in README.md docs/*.md; do
  dir=$(dirname "$file")
  # Inline links [text](target) outside code and HTML comments; http(s) and mailto skipped.
  while IFS= read -r target; do
    case "$target" in http://*|https://*|mailto:*) continue ;; esac
    path=${target%%#*}
    anchor=""
    [[ "$target" == *#* ]] && anchor=${target#*#}
    if [ -z "$path" ]; then
      resolved=$file
    else
      resolved="$dir/$path"
    fi
    if [ ! -e "$resolved" ]; then
      echo "FAILED: $file links to $target, which does not exist" >&2
      status=1
      continue
    fi
    if [ -n "$anchor" ] && [ -f "$resolved" ] && [[ "$resolved" == *.md ]]; then
      if ! anchors "$resolved" | grep -qxF "$anchor"; then
        echo "FAILED: $file links to $target, but $resolved has no heading #$anchor" >&2
        status=1
      fi
    fi
  done < <(awk '/^```/ { code = !code; next } !code' "$file" | sed -E 's/`[^`]*`//g; s/<!--.*-->//g' |
           grep -oE '\]\([^)]+\)' | sed -E 's/^\]\(//; s/\)$//; s/ +"[^"]*"$//')
done
[ "$status" = 0 ] && echo "docs index and links: ok"
exit "$status"
