// main() of the tests in tests/distributed: starts the process group (MPI under mpirun, the
// local backend otherwise) with one kernel thread per rank, and ends the whole job at the
// first failed assertion on any rank (Note [A failing rank ends the job]): gtest would go on
// to the next test, whose collectives the other ranks would then pair with the wrong calls.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "adjoint/distributed.h"
#include "adjoint/error.h"
#include "adjoint/threading.h"

namespace {

using adjoint::dist::ProcessGroup;

class EndJobOnFailure : public testing::EmptyTestEventListener {
 public:
  explicit EndJobOnFailure(ProcessGroup& pg) : pg_(pg) {}
  // The test's name is kept here: UnitTest::current_test_info() would take the lock gtest
  // holds while it reports a part result, and deadlock.
  void OnTestStart(const testing::TestInfo& info) override {
    test_ = adjoint::detail::str(info.test_suite_name(), ".", info.name());
  }
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    pg_.abort(
        adjoint::detail::str(test_, " failed at ", result.file_name() ? result.file_name() : "?",
                             ":", result.line_number(), ": ", result.message()),
        1);
  }

 private:
  ProcessGroup& pg_;
  std::string test_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  adjoint::set_num_threads(1);  // the ranks share the machine's cores
  try {
    adjoint::dist::Environment env;  // an exception unwinding through it ends the job
    ProcessGroup& pg = env.group();
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    if (pg.world_size() > 1) {
      // Rank 0 prints the usual report; a failure on any rank is printed by that rank, with
      // its number, as it ends the job.
      if (pg.rank() != 0) delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new EndJobOnFailure(pg));
    }
    return RUN_ALL_TESTS();
  } catch (const std::exception& e) {  // only with --gtest_catch_exceptions=0
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
