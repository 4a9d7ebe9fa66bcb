// Stands in for mpi/mpi_backend.cpp when CMake did not find MPI: asking for the MPI backend
// is a clear error instead of a link failure.
#include "adjoint/error.h"
#include "distributed/backends.h"

namespace adjoint::dist::detail {

std::unique_ptr<CommBackend> make_mpi_backend() {
  ADJOINT_CHECK(false, NotImplemented, "dist.init",
                "adjoint was built without MPI (on Debian: apt-get install libopenmpi-dev "
                "openmpi-bin, then configure again)");
  return nullptr;
}

bool mpi_built() { return false; }

}  // namespace adjoint::dist::detail
