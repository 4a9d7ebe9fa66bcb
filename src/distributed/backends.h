// The backends ProcessGroup can start. The MPI one is built only when CMake finds MPI; the
// stub that replaces it otherwise says so (chosen at link time, see CMakeLists.txt).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "adjoint/distributed/comm_backend.h"

namespace adjoint::dist::detail {

/// World size 1 without any communication library.
std::unique_ptr<CommBackend> make_local_backend();
/// MPI (initialised here unless the program already did). Throws NotImplemented when adjoint
/// was built without MPI.
std::unique_ptr<CommBackend> make_mpi_backend();
/// Whether this build has the MPI backend.
bool mpi_built();
/// Whether a launcher (mpirun, srun with PMI/PMIx) started this process.
bool launched_by_mpi();

/// The most elements (bytes for broadcast and all_gather) one MPI call moves; larger tensors
/// go in pieces (Note [Counts past int] in mpi/mpi_backend.cpp). Tests lower it to reach the
/// piecewise paths with small tensors; every rank must use the same value.
inline std::atomic<int64_t>& max_count_per_call() {
  static std::atomic<int64_t> limit{int64_t{1} << 30};
  return limit;
}

}  // namespace adjoint::dist::detail
