// Scenarios for failing_rank_test.sh: one rank fails while the other waits in a collective,
// and the job must end with that rank's error instead of hanging. Run without the variable
// ADJOINT_FAILING_RANK_SCENARIO (as ctest's unit run does), every case skips.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "distributed/dist_support.h"

namespace adjoint::testing {
namespace {

std::string scenario() {
  const char* s = std::getenv("ADJOINT_FAILING_RANK_SCENARIO");
  return s ? s : "";
}

// The last rank fails; rank 0 is blocked in an all_reduce the failing rank never joins.
TEST(FailingRank, AssertionEndsTheJob) {
  if (scenario() != "assertion") GTEST_SKIP() << "run by failing_rank_test.sh";
  Tensor x = ones({4}, DType::Float64);
  if (pg().rank() == pg().world_size() - 1) {
    throw Error(ErrorKind::Value, "scenario", "rank-failure-marker from the test body");
  }
  pg().all_reduce(x);
  ADD_FAILURE() << "rank " << pg().rank()
                << " finished an all_reduce the failing rank never joined";
}

TEST(FailingRank, UncaughtExceptionEndsTheJob) {
  if (scenario() != "terminate") GTEST_SKIP() << "run by failing_rank_test.sh";
  Tensor x = ones({4}, DType::Float64);
  if (pg().rank() == pg().world_size() - 1) {
    // Outside gtest's reach: an exception escaping a thread calls std::terminate, whose
    // handler (installed by dist::init) ends the job.
    std::thread([] {
      throw Error(ErrorKind::Value, "scenario", "rank-failure-marker from a thread");
    }).join();
  }
  pg().all_reduce(x);
  ADD_FAILURE() << "rank " << pg().rank()
                << " finished an all_reduce the failing rank never joined";
}

// Run with --gtest_catch_exceptions=0: the exception leaves RUN_ALL_TESTS and unwinds through
// the harness's dist::Environment, whose destructor must end the job rather than finalise.
TEST(FailingRank, ExceptionThroughEnvironmentEndsTheJob) {
  if (scenario() != "environment") GTEST_SKIP() << "run by failing_rank_test.sh";
  Tensor x = ones({4}, DType::Float64);
  if (pg().rank() == pg().world_size() - 1)
    throw Error(ErrorKind::Value, "scenario", "rank-failure-marker through the environment");
  pg().all_reduce(x);
  ADD_FAILURE() << "rank " << pg().rank()
                << " finished an all_reduce the failing rank never joined";
}

}  // namespace
}  // namespace adjoint::testing
