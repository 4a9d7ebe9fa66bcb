// Note [A failing rank ends the job]
// When one rank throws and dies while the others sit in a collective waiting for it, an MPI
// job can hang until its time limit: OpenMPI ends the job when a process exits with a nonzero
// status, but a process that fails inside MPI_Finalize or keeps a non-daemon thread alive
// never exits. So an uncaught exception (std::terminate) prints what was thrown, with the
// rank, and calls MPI_Abort, which kills every process of the job at once. The test harness
// (tests/distributed/mpi_main.cpp) does the same for a failed assertion.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <typeinfo>

#include "adjoint/distributed/process_group.h"
#include "adjoint/error.h"
#include "distributed/terminate.h"

namespace adjoint::dist::detail {
namespace {

[[noreturn]] void on_terminate() {
  std::string what = "std::terminate called without an active exception";
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      what = std::string("uncaught exception: ") + ex.what();
    } catch (...) {
      what = "uncaught exception of a type not derived from std::exception";
    }
  }
  ProcessGroup* pg = default_group_or_null();
  if (pg && pg->world_size() > 1) pg->abort(what + "; ending the job", 1);
  std::fprintf(stderr, "%s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace

void install_terminate_handler() {
  static std::once_flag once;
  std::call_once(once, [] { std::set_terminate(&on_terminate); });
}

}  // namespace adjoint::dist::detail
