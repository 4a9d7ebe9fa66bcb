#!/usr/bin/env bash
# A rank that fails ends the whole MPI job with its error, instead of leaving the other rank
# blocked in a collective (Note [A failing rank ends the job]). For each scenario of
# failing_rank_test.cpp: mpirun -np 2 must exit nonzero well within the time limit, and its
# output must carry the failing rank's message.
#   failing_rank_test.sh MPIEXEC TEST_BINARY
set -uo pipefail
mpiexec=$1
binary=$2
limit=60
status=0
for scenario in assertion terminate environment; do
  # What the output must carry: the thrown message, or for an exception unwinding through
  # dist::Environment (whose destructor cannot see it) the destructor's own.
  marker="rank-failure-marker"
  flags=()
  if [ "$scenario" = environment ]; then
    marker="an exception left the scope of dist::Environment"
    flags=(--gtest_catch_exceptions=0)
  fi
  start=$(date +%s)
  out=$(ADJOINT_FAILING_RANK_SCENARIO=$scenario timeout $limit "$mpiexec" -np 2 --oversubscribe \
        "$binary" --gtest_filter='FailingRank.*' "${flags[@]}" 2>&1)
  rc=$?
  took=$(($(date +%s) - start))
  if [ "$rc" -eq 124 ]; then
    echo "FAIL [$scenario]: the job hung (killed after ${limit}s)"; echo "$out" | tail -20; status=1; continue
  fi
  if [ "$rc" -eq 0 ]; then
    echo "FAIL [$scenario]: the job exited 0"; echo "$out" | tail -20; status=1; continue
  fi
  if ! grep -qF "$marker" <<<"$out"; then
    echo "FAIL [$scenario]: the failing rank's error is not in the output"; echo "$out" | tail -20
    status=1; continue
  fi
  if ! grep -q "\[rank 1\]" <<<"$out"; then
    echo "FAIL [$scenario]: the output does not say which rank failed"; echo "$out" | tail -20
    status=1; continue
  fi
  if grep -q "finished an all_reduce the failing rank never joined" <<<"$out"; then
    echo "FAIL [$scenario]: a rank went past a collective the failing rank never joined"
    status=1; continue
  fi
  echo "ok [$scenario]: exit $rc after ${took}s"
done
exit $status
