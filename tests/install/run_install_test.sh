#!/usr/bin/env bash
# The install test (ctest `install_consumer`, label slow). Installs an existing adjoint build
# into a temporary prefix, builds and runs tests/install/consumer against it through
# find_package, then builds and runs tests/install/add_subdirectory from the source tree.
#   run_install_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail

SRC=$(cd "${1:?usage: run_install_test.sh SOURCE_DIR BUILD_DIR}" && pwd)
BIN=$(cd "${2:?usage: run_install_test.sh SOURCE_DIR BUILD_DIR}" && pwd)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/adjoint-install-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
JOBS=$(nproc 2>/dev/null || echo 2)

# Use the build's compiler and build type; a sanitized build needs its flags at link time.
cache() { sed -n "s/^$1:[A-Z]*=//p" "$BIN/CMakeCache.txt"; }
COMMON=(-DCMAKE_CXX_COMPILER="$(cache CMAKE_CXX_COMPILER)"
        -DCMAKE_BUILD_TYPE="$(cache CMAKE_BUILD_TYPE)")
if [ "$(cache ADJOINT_SANITIZE)" = "ON" ]; then
  COMMON+=(-DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer"
           -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined")
fi

step() { echo "== $*"; }
quiet() {  # run a command, showing its output only when it fails
  local log="$TMP/log"
  if ! "$@" >"$log" 2>&1; then
    cat "$log"
    echo "FAILED: $*" >&2
    exit 1
  fi
}

step "cmake --install $BIN -> $TMP/prefix"
quiet cmake --install "$BIN" --prefix "$TMP/prefix"
test -f "$TMP/prefix/include/adjoint/adjoint.h"
ls "$TMP"/prefix/lib*/cmake/adjoint/adjointConfig.cmake >/dev/null

step "find_package consumer"
quiet cmake -S "$SRC/tests/install/consumer" -B "$TMP/consumer" "${COMMON[@]}" \
  -DCMAKE_PREFIX_PATH="$TMP/prefix"
quiet cmake --build "$TMP/consumer" -j "$JOBS"
"$TMP/consumer/consumer"

step "add_subdirectory consumer"
quiet cmake -S "$SRC/tests/install/add_subdirectory" -B "$TMP/add_subdirectory" "${COMMON[@]}" \
  -DADJOINT_SOURCE_DIR="$SRC"
quiet cmake --build "$TMP/add_subdirectory" -j "$JOBS"
"$TMP/add_subdirectory/consumer"

echo "install test passed"
