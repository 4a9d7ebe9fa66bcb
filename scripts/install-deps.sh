#!/usr/bin/env bash
# Installs the Debian 12 packages adjoint needs to build and test, if any is missing.
# Idempotent: does nothing (no apt-get at all) when everything is present.
#   scripts/install-deps.sh [extra-package ...]
set -euo pipefail

# libopenmpi-dev and openmpi-bin: the MPI backend of adjoint::dist and mpirun for the tests
# labelled mpi. They are needed when CMake configures (FindMPI), so they are installed with the
# build's packages; a build without them still works, on one process (docs/distributed.md).
# libdnnl-dev: oneDNN, for bfloat16 matmuls on CPUs with AVX512-BF16 or AMX (optional at build
# time: without it bfloat16 products widen to float32; docs/mixed-precision.md).
# zlib1g-dev: reading gzip-compressed IDX files. dataset-fashion-mnist (31 MB): the vision demo's
# 70,000 images under /usr/share/datasets/fashion-mnist (docs/vision.md).
PKGS=(cmake g++ make ccache libopenblas-dev libgtest-dev libgmock-dev libhwy-dev nlohmann-json3-dev libcli11-dev python3
      libopenmpi-dev openmpi-bin libdnnl-dev zlib1g-dev dataset-fashion-mnist "$@")
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "installing: ${missing[*]}" >&2
$SUDO apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
