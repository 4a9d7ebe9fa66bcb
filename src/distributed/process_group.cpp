// ProcessGroup's front end: validates each call, allocates outputs and hands the request to
// the backend; the default group and its init/finalize. Backends only move bytes.
#include "adjoint/distributed/process_group.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "adjoint/tensor_impl.h"
#include "distributed/backends.h"
#include "distributed/call_check.h"
#include "distributed/terminate.h"

namespace adjoint::dist {

using detail::op_name;

namespace {

// The first refusal of a call, kept instead of thrown: see Note [Agreeing on a call].
struct Refusal {
  std::optional<Error> error;
  template <class... Args>
  void check(bool ok, ErrorKind kind, CollectiveKind op, const Args&... args) {
    if (ok || error) return;
    error.emplace(kind, op_name(op), adjoint::detail::str(args...));
  }
};

bool reducible(DType d, ReduceOp op) {
  if (d == DType::Bool) return false;
  return op != ReduceOp::Average || is_floating(d);
}

CommRequest request_for(CollectiveKind kind, ReduceOp op, int root, const Tensor& t,
                        Refusal& refusal, bool check, int64_t step) {
  CommRequest r;
  r.kind = kind;
  r.op = op;
  r.root = root;
  r.check = check;
  r.local_error = refusal.error;
  r.descriptor = detail::describe_call(kind, op, root, t, !refusal.error, step);
  return r;
}

}  // namespace

ProcessGroup::ProcessGroup(std::unique_ptr<CommBackend> backend, bool check_shapes)
    : backend_(std::move(backend)), check_shapes_(check_shapes) {}

ProcessGroup::~ProcessGroup() { backend_->shutdown(); }

int ProcessGroup::rank() const { return backend_->rank(); }
int ProcessGroup::world_size() const { return backend_->world_size(); }
std::string ProcessGroup::backend_name() const { return backend_->name(); }

Work ProcessGroup::submit(CommRequest request) {
  std::optional<Error> refused = request.local_error;
  // Without the exchange a refusing rank cannot tell the others; it throws at once.
  if (refused && !check_shapes_) throw Error(*refused);
  Work work(backend_->enqueue(std::move(request)));
  // The refusal was queued so that the other ranks fail too; this rank fails here and now.
  if (refused) throw Error(*refused);
  return work;
}

Work ProcessGroup::all_reduce_async(const Tensor& tensor, ReduceOp op) {
  const auto kind = CollectiveKind::AllReduce;
  Refusal no;
  no.check(tensor.defined(), ErrorKind::Value, kind, "the tensor is undefined");
  if (tensor.defined()) {
    no.check(reducible(tensor.dtype(), op), ErrorKind::DType, kind, "cannot ", to_string(op), " ",
             describe(tensor), ": needs float16, bfloat16, float32, float64",
             op == ReduceOp::Average ? "" : " or int64");
    no.check(tensor.is_contiguous(), ErrorKind::Value, kind,
             "works in place on a contiguous tensor, got ", describe(tensor), " with strides ",
             tensor.strides(), " (reduce a contiguous copy and copy it back)");
  }
  CommRequest r = request_for(kind, op, 0, tensor, no, check_shapes_, step());
  if (!no.error) {
    r.input = r.output = tensor;
    tensor.impl()->storage->bump_version();  // written in place, as by any in-place op
  }
  return submit(std::move(r));
}

void ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) {
  all_reduce_async(tensor, op).wait();
}

Work ProcessGroup::broadcast_async(const Tensor& tensor, int root) {
  const auto kind = CollectiveKind::Broadcast;
  Refusal no;
  no.check(root >= 0 && root < world_size(), ErrorKind::Index, kind, "root ", root,
           " is not a rank of this group of ", world_size());
  no.check(tensor.defined(), ErrorKind::Value, kind, "the tensor is undefined");
  if (tensor.defined()) {
    no.check(tensor.is_contiguous(), ErrorKind::Value, kind,
             "works in place on a contiguous tensor, got ", describe(tensor), " with strides ",
             tensor.strides());
  }
  CommRequest r = request_for(kind, ReduceOp::Sum, root, tensor, no, check_shapes_, step());
  if (!no.error) {
    r.input = r.output = tensor;
    tensor.impl()->storage->bump_version();
  }
  return submit(std::move(r));
}

void ProcessGroup::broadcast(const Tensor& tensor, int root) {
  broadcast_async(tensor, root).wait();
}

Work ProcessGroup::all_gather_async(const Tensor& tensor) {
  const auto kind = CollectiveKind::AllGather;
  Refusal no;
  no.check(tensor.defined(), ErrorKind::Value, kind, "the tensor is undefined");
  CommRequest r = request_for(kind, ReduceOp::Sum, 0, tensor, no, check_shapes_, step());
  if (!no.error) {
    Shape out = tensor.dim() == 0 ? Shape{1} : tensor.shape();
    out[0] *= world_size();
    r.input = tensor.contiguous();
    r.output = empty(out, tensor.dtype());
  }
  return submit(std::move(r));
}

Tensor ProcessGroup::all_gather(const Tensor& tensor) { return all_gather_async(tensor).result(); }

Work ProcessGroup::reduce_scatter_async(const Tensor& tensor, ReduceOp op) {
  const auto kind = CollectiveKind::ReduceScatter;
  const int n = world_size();
  Refusal no;
  no.check(tensor.defined(), ErrorKind::Value, kind, "the tensor is undefined");
  if (tensor.defined()) {
    no.check(reducible(tensor.dtype(), op), ErrorKind::DType, kind, "cannot ", to_string(op), " ",
             describe(tensor), ": needs float16, bfloat16, float32, float64",
             op == ReduceOp::Average ? "" : " or int64");
    no.check(tensor.dim() >= 1 && tensor.size(0) % n == 0, ErrorKind::Shape, kind, "dim 0 of ",
             describe(tensor), " must be a multiple of the world size ", n);
  }
  CommRequest r = request_for(kind, op, 0, tensor, no, check_shapes_, step());
  if (!no.error) {
    Shape out = tensor.shape();
    out[0] /= n;
    r.input = tensor.contiguous();
    r.output = empty(out, tensor.dtype());
  }
  return submit(std::move(r));
}

Tensor ProcessGroup::reduce_scatter(const Tensor& tensor, ReduceOp op) {
  return reduce_scatter_async(tensor, op).result();
}

Work ProcessGroup::barrier_async() {
  Refusal no;
  return submit(
      request_for(CollectiveKind::Barrier, ReduceOp::Sum, 0, Tensor(), no, check_shapes_, step()));
}

void ProcessGroup::barrier() { barrier_async().wait(); }

void ProcessGroup::abort(const std::string& message, int code) {
  backend_->abort(message, code);
  std::abort();  // not reached: backends do not return from abort
}

// ---- the default group ----

namespace {
std::mutex g_mutex;
// Leaked on purpose when finalize() is never called: destroying it at exit would finalise MPI
// from a static destructor, which waits for the other ranks, which may be waiting for us.
ProcessGroup* g_default = nullptr;
}  // namespace

ProcessGroup& init(const InitOptions& options) {
  std::lock_guard<std::mutex> lock(g_mutex);
  ADJOINT_CHECK(!g_default, Value, "dist.init", "the default process group is already running (",
                g_default->backend_name(), ", rank ", g_default->rank(), " of ",
                g_default->world_size(), "); call dist::finalize() first");
  std::unique_ptr<CommBackend> backend;
  switch (options.backend) {
    case BackendKind::Local:
      backend = detail::make_local_backend();
      break;
    case BackendKind::Mpi:
      backend = detail::make_mpi_backend();
      break;
    case BackendKind::Auto:
      // A launcher's variables without MPI in the build would leave every process thinking it
      // is alone and training on its own: refuse rather than do that silently.
      if (detail::launched_by_mpi())
        backend = detail::make_mpi_backend();
      else
        backend = detail::make_local_backend();
      break;
  }
  g_default = new ProcessGroup(std::move(backend), options.check_shapes);
  if (options.abort_on_terminate) detail::install_terminate_handler();
  return *g_default;
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_default != nullptr;
}

ProcessGroup& default_group() {
  std::lock_guard<std::mutex> lock(g_mutex);
  ADJOINT_CHECK(g_default, Value, "dist.default_group",
                "no process group: call dist::init() (or make a dist::Environment) first");
  return *g_default;
}

ProcessGroup* default_group_or_null() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_default;
}

void finalize() {
  ProcessGroup* pg = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    pg = std::exchange(g_default, nullptr);
  }
  delete pg;  // waits for queued collectives, then MPI_Finalize if init() initialised MPI
}

Environment::Environment(const InitOptions& options)
    : uncaught_at_start_(std::uncaught_exceptions()) {
  init(options);
}

Environment::~Environment() {
  if (std::uncaught_exceptions() > uncaught_at_start_) {
    // The other ranks may be inside a collective that this rank will never join, and
    // MPI_Finalize would wait for them: end the job instead (the message says why).
    if (ProcessGroup* pg = default_group_or_null(); pg && pg->world_size() > 1)
      pg->abort("an exception left the scope of dist::Environment; ending the job", 1);
  }
  finalize();
}

}  // namespace adjoint::dist
