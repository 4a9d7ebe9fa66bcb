// The world-size-1 backend: no communication library, every collective is the identity (a
// copy for the out-of-place ones), completed before enqueue returns.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "distributed/backends.h"
#include "distributed/call_check.h"

namespace adjoint::dist::detail {
namespace {

class LocalBackend final : public CommBackend {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string name() const override { return "local"; }

  std::shared_ptr<WorkState> enqueue(CommRequest request) override {
    auto state = std::make_shared<WorkState>();
    state->output = request.output;
    state->started = std::chrono::steady_clock::now();
    try {
      if (request.check) check_agreement(request, {request.descriptor}, 0);
      if (request.local_error) throw Error(*request.local_error);
      // With one rank the sum, average and max of one tensor are the tensor itself.
      const bool copies = request.kind == CollectiveKind::AllGather ||
                          request.kind == CollectiveKind::ReduceScatter;
      if (copies && request.input.numel() > 0)
        std::memcpy(request.output.raw_data(), request.input.raw_data(), request.input.nbytes());
      state->finished = std::chrono::steady_clock::now();
      state->complete();
    } catch (...) {
      state->finished = std::chrono::steady_clock::now();
      state->complete(std::current_exception());
    }
    return state;
  }

  void shutdown() override {}

  [[noreturn]] void abort(const std::string& message, int code) override {
    std::fprintf(stderr, "[rank 0] %s\n", message.c_str());
    std::fflush(stderr);
    std::_Exit(code);
  }
};

}  // namespace

std::unique_ptr<CommBackend> make_local_backend() { return std::make_unique<LocalBackend>(); }

bool launched_by_mpi() {
  // OpenMPI's mpirun, then PMIx and PMI (MPICH's hydra, Slurm's srun).
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(var)) return true;
  return false;
}

}  // namespace adjoint::dist::detail
