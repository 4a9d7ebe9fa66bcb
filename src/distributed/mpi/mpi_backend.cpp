// The MPI backend: a communication thread that runs the queued collectives one by one with
// blocking MPI calls on a private communicator. See Note [MPI progress and threads].
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <type_traits>

#include "adjoint/error.h"
#include "distributed/backends.h"
#include "distributed/call_check.h"

namespace adjoint::dist::detail {
namespace {

// Note [MPI progress and threads]
// OpenMPI moves data only while some thread is inside an MPI call: an MPI_Iallreduce started
// before backward and tested after it mostly runs at the end. So every collective runs on one
// dedicated communication thread, which sits in a blocking MPI call while the caller's thread
// computes; the caller gets a Work to wait on. Only that thread calls MPI between init and
// shutdown (the caller's thread initialises and finalises MPI before the thread starts and
// after it is joined), so MPI_THREAD_SERIALIZED is the level needed: calls never overlap,
// though they come from two threads. MPI_THREAD_MULTIPLE is not asked for: OpenMPI then locks
// around every call and some of its transports refuse it. A program that initialised MPI
// itself must have at least SERIALIZED, and must not make MPI calls of its own while adjoint's
// collectives may run (it would need MULTIPLE for that). The thread runs the queue in order,
// which is also the order MPI requires every rank to call collectives in. MPI_Abort, on the
// error path only, may be called from any thread: the job ends either way.

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::Float32:
      return MPI_FLOAT;
    case DType::Float64:
      return MPI_DOUBLE;
    case DType::Int64:
      return MPI_INT64_T;
    case DType::Int32:
      return MPI_INT32_T;
    case DType::Int16:
      return MPI_INT16_T;
    case DType::Int8:
      return MPI_INT8_T;
    case DType::UInt8:
      return MPI_UINT8_T;
    case DType::Bool:
      return MPI_C_BOOL;
    case DType::Float16:
    case DType::BFloat16:
      // MPI has no 16-bit float: the bits move as uint16, and reductions use the ops below,
      // never MPI's built-in ones (which would add the bits as integers).
      return MPI_UINT16_T;
  }
  return MPI_BYTE;
}

// MPI_MAX compares with `>`, so a NaN on one rank is lost or kept depending on the order; the
// library's max propagates NaN everywhere else, so floating-point max uses this op instead.
template <class T>
void nan_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i)
    if (std::isnan(a[i]) || a[i] > b[i]) b[i] = a[i];
}

// Sum and max of float16/bfloat16 (H): each element widened to float32, combined and rounded
// once, as NCCL and Gloo reduce 16-bit floats. With more than two ranks every step rounds.
template <class H>
void reduced_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = H(static_cast<float>(a[i]) + static_cast<float>(b[i]));
}

template <class H>
void reduced_max(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    if (std::isnan(x) || x > y) b[i] = a[i];
  }
}

// t /= n elementwise; float16/bfloat16 divide in float32 and round once.
template <class T>
void divide(const Tensor& t, int n) {
  T* p = static_cast<T*>(t.raw_data());
  const int64_t count = t.numel();
  for (int64_t i = 0; i < count; ++i) {
    if constexpr (std::is_floating_point_v<T>)
      p[i] /= static_cast<T>(n);
    else
      p[i] = T(static_cast<float>(p[i]) / static_cast<float>(n));
  }
}

class MpiBackend final : public CommBackend {
 public:
  MpiBackend() {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    ADJOINT_CHECK(!finalized, Value, "dist.init",
                  "MPI was already finalised in this process; it cannot be started again");
    int provided = 0;
    if (!initialized) {
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
      owns_mpi_ = true;
    } else {
      MPI_Query_thread(&provided);
    }
    ADJOINT_CHECK(provided >= MPI_THREAD_SERIALIZED, Value, "dist.init",
                  "MPI provides thread level ", provided,
                  " but adjoint's communication thread needs MPI_THREAD_SERIALIZED (",
                  MPI_THREAD_SERIALIZED, "); initialise MPI with MPI_Init_thread");
    // A private communicator: the program's own MPI traffic can never match ours.
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Op_create(&nan_max<float>, 1, &max_f32_);
    MPI_Op_create(&nan_max<double>, 1, &max_f64_);
    MPI_Op_create(&reduced_sum<Half>, 1, &sum_f16_);
    MPI_Op_create(&reduced_max<Half>, 1, &max_f16_);
    MPI_Op_create(&reduced_sum<BFloat16>, 1, &sum_bf16_);
    MPI_Op_create(&reduced_max<BFloat16>, 1, &max_bf16_);
    thread_ = std::thread([this] { run(); });
  }

  ~MpiBackend() override { shutdown(); }

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  std::shared_ptr<WorkState> enqueue(CommRequest request) override {
    auto state = std::make_shared<WorkState>();
    state->output = request.output;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ADJOINT_CHECK(!stopping_, Value, op_name(request.kind), "the process group was finalised");
      queue_.push_back({std::move(request), state});
    }
    cv_.notify_one();
    return state;
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_one();
    thread_.join();
    MPI_Op_free(&max_f32_);
    MPI_Op_free(&max_f64_);
    for (MPI_Op* op : {&sum_f16_, &max_f16_, &sum_bf16_, &max_bf16_}) MPI_Op_free(op);
    MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }

  [[noreturn]] void abort(const std::string& message, int code) override {
    std::fprintf(stderr, "[rank %d] %s\n", rank_, message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this is for the compiler
  }

 private:
  struct Item {
    CommRequest request;
    std::shared_ptr<WorkState> state;
  };

  // The communication thread: runs each request to its end, in order, until shutdown (after
  // finishing what was queued before it).
  void run() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      // Completed after the handler has ended: the waiting thread rethrows the exception,
      // and this thread must be done with it by then.
      std::exception_ptr error;
      item.state->started = std::chrono::steady_clock::now();
      try {
        execute(item.request);
      } catch (...) {
        error = std::current_exception();
      }
      item.state->finished = std::chrono::steady_clock::now();
      item.state->complete(std::move(error));
    }
  }

  void execute(const CommRequest& r) {
    if (r.check) {
      std::vector<CallDescriptor> all(size_);
      const int words = static_cast<int>(r.descriptor.words.size());
      MPI_Allgather(r.descriptor.words.data(), words, MPI_INT64_T, all.data(), words, MPI_INT64_T,
                    comm_);
      check_agreement(r, all, rank_);
    }
    if (r.local_error) throw Error(*r.local_error);
    // Note [Counts past int]
    // MPI counts are int, so a tensor of more than `limit` elements (bytes, for the byte moves)
    // goes in pieces of at most `limit`: consecutive all-reduces and broadcasts; an all-gather
    // as each rank broadcasting its block, and a reduce-scatter as a reduce of each rank's
    // block to that rank. Every rank cuts the same pieces, since the shapes agree.
    const int64_t limit = max_count_per_call().load();
    auto pieces = [limit](int64_t total, auto&& move) {
      for (int64_t at = 0; at < total; at += limit)
        move(at, static_cast<int>(std::min(limit, total - at)));
    };
    char* out = static_cast<char*>(r.output.defined() ? r.output.raw_data() : nullptr);
    switch (r.kind) {
      case CollectiveKind::Barrier:
        MPI_Barrier(comm_);
        return;
      case CollectiveKind::Broadcast:
        pieces(static_cast<int64_t>(r.output.nbytes()),
               [&](int64_t at, int n) { MPI_Bcast(out + at, n, MPI_BYTE, r.root, comm_); });
        return;
      case CollectiveKind::AllGather: {
        const int64_t bytes = static_cast<int64_t>(r.input.nbytes());
        if (bytes <= limit) {
          MPI_Allgather(r.input.raw_data(), static_cast<int>(bytes), MPI_BYTE, out,
                        static_cast<int>(bytes), MPI_BYTE, comm_);
          return;
        }
        for (int q = 0; q < size_; ++q) {
          char* block = out + q * bytes;
          if (q == rank_) std::memcpy(block, r.input.raw_data(), static_cast<std::size_t>(bytes));
          pieces(bytes, [&](int64_t at, int n) { MPI_Bcast(block + at, n, MPI_BYTE, q, comm_); });
        }
        return;
      }
      case CollectiveKind::AllReduce: {
        const int64_t item = static_cast<int64_t>(itemsize(r.output.dtype()));
        const MPI_Datatype type = mpi_type(r.output.dtype());
        const MPI_Op op = mpi_op(r.op, r.output.dtype());
        pieces(r.output.numel(), [&](int64_t at, int n) {
          MPI_Allreduce(MPI_IN_PLACE, out + at * item, n, type, op, comm_);
        });
        break;
      }
      case CollectiveKind::ReduceScatter: {
        const int64_t count = r.output.numel();
        const int64_t item = static_cast<int64_t>(itemsize(r.input.dtype()));
        const MPI_Datatype type = mpi_type(r.input.dtype());
        const MPI_Op op = mpi_op(r.op, r.input.dtype());
        const char* in = static_cast<const char*>(r.input.raw_data());
        if (count <= limit) {
          MPI_Reduce_scatter_block(in, out, static_cast<int>(count), type, op, comm_);
          break;
        }
        for (int q = 0; q < size_; ++q)
          pieces(count, [&](int64_t at, int n) {
            MPI_Reduce(in + (q * count + at) * item, q == rank_ ? out + at * item : nullptr, n,
                       type, op, q, comm_);
          });
        break;
      }
    }
    // MPI has no average: a sum divided here, by a plain loop. Kernels are not run on this
    // thread, so it never competes with the caller's thread pool.
    if (r.op == ReduceOp::Average) {
      if (r.output.dtype() == DType::Float32) divide<float>(r.output, size_);
      if (r.output.dtype() == DType::Float64) divide<double>(r.output, size_);
      if (r.output.dtype() == DType::Float16) divide<Half>(r.output, size_);
      if (r.output.dtype() == DType::BFloat16) divide<BFloat16>(r.output, size_);
    }
  }

  MPI_Op mpi_op(ReduceOp op, DType d) const {
    if (d == DType::Float16) return op == ReduceOp::Max ? max_f16_ : sum_f16_;
    if (d == DType::BFloat16) return op == ReduceOp::Max ? max_bf16_ : sum_bf16_;
    if (op != ReduceOp::Max) return MPI_SUM;
    if (d == DType::Float32) return max_f32_;
    if (d == DType::Float64) return max_f64_;
    return MPI_MAX;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Op max_f32_ = MPI_OP_NULL, max_f64_ = MPI_OP_NULL;
  MPI_Op sum_f16_ = MPI_OP_NULL, max_f16_ = MPI_OP_NULL;
  MPI_Op sum_bf16_ = MPI_OP_NULL, max_bf16_ = MPI_OP_NULL;
  int rank_ = 0, size_ = 1;
  bool owns_mpi_ = false;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<CommBackend> make_mpi_backend() { return std::make_unique<MpiBackend>(); }

bool mpi_built() { return true; }

}  // namespace adjoint::dist::detail
