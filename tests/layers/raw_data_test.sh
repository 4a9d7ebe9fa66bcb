#!/usr/bin/env bash
# Which files above the kernel table read or write a tensor's memory directly (raw_data,
# data_ptr, impl()->data()): every such file outside src/backend, each listed below with why.
# Fails when one appears in a file that is not listed, or when a listed file has none left, so
# the list only shrinks as the sites move behind kernels (issue 37: a device whose memory the
# CPU cannot read, such as CUDA, needs every one of them behind its kernel table;
# docs/devices.md).
#   tests/layers/raw_data_test.sh REPO_ROOT
set -euo pipefail
cd "${1:-.}"

declare -A known=(
  [src/core/tensor_impl.cpp]="defines raw_data() and data_ptr<T>() (CPU memory only, checked)"
  # Communication backends: like the kernel table, each is one device's implementation (a CUDA
  # build brings NCCL's, which reads device memory itself).
  [src/distributed/local_backend.cpp]="the one-process backend copies buffers"
  [src/distributed/mpi/mpi_backend.cpp]="MPI reads and writes host buffers"
)

pattern='raw_data\(|data_ptr<|data_ptr\(|impl\(\)->data\(\)'
mapfile -t found < <(grep -rlE "$pattern" src --include='*.cpp' --include='*.h' | grep -v '^src/backend/' | sort)
if ((${#found[@]} == 0)); then
  echo "no file reads raw data: the grep found nothing, is this the repository root?" >&2
  exit 1
fi
status=0
declare -A seen=()
for f in "${found[@]}"; do
  seen[$f]=1
  [[ -n "${known[$f]:-}" ]] && continue
  echo "NEW: $f reads or writes tensor memory above the kernel table:" >&2
  grep -nE "$pattern" "$f" | sed 's/^/    /' >&2
  status=1
done
for f in "${!known[@]}"; do
  if [[ -z "${seen[$f]:-}" ]]; then
    echo "GONE: $f no longer touches tensor memory; take it off the list in $0" >&2
    status=1
  fi
done
((status == 0)) && echo "tensor memory is touched above the kernels by ${#known[@]} known files"
exit $status
