// A small persistent thread pool. Workers and the caller wait for each other by spinning for
// a short while, then sleep on a condition variable (see Note [Pool waiting]).
#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "adjoint/error.h"
#include "adjoint/threading.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

extern "C" void openblas_set_num_threads(int);

namespace adjoint {
namespace {

// Note [Pool waiting]
// A training step hands the pool a few hundred jobs of 0.1-2 ms each, separated by serial
// stretches (the engine, small ops) of up to a few milliseconds. Waking a sleeping thread
// takes a futex call plus, on a virtual machine, the hypervisor waking an idle vCPU: tens to
// hundreds of microseconds, during which the other thread sits finished and waiting. Measured
// on gpt-tiny (2 vCPUs): with sleep-only waits the caller spent ~40 ms of a ~450 ms step
// waiting for the worker. So both sides first spin, for up to kSpin, on the atomic they wait
// for, and only then sleep on the condition variable. In interleaved gpt-tiny runs a 200 us
// spin beat sleeping (~424 vs ~458 ms a step, 3 pairs), 2 ms beat 200 us (~421 vs ~455, 6
// pairs) and 1 ms (~394 vs ~415, 4 pairs); the mlp step did not care. That is far shorter than
// OpenMP runtimes' defaults (Intel's KMP_BLOCKTIME is 200 ms), and it cannot starve OpenBLAS:
// products are split here and run on single-threaded OpenBLAS (Note [Gemm threading]), so
// OpenBLAS's own threads stay parked. A pool with more threads than cores does not spin: there the
// thread being waited for may need the spinner's core.
constexpr auto kSpin = std::chrono::microseconds(2000);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until done() or `spin` has passed; returns done().
template <class Done>
bool spin_until(std::chrono::microseconds spin, Done&& done) {
  const auto deadline = std::chrono::steady_clock::now() + spin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return done();
    // With more threads than cores (or a busy machine) the thread we wait for may need this
    // core: offer it now and then rather than burning the whole spin.
    std::this_thread::yield();
  }
}

class Pool {
 public:
  explicit Pool(int threads) { resize(threads); }
  ~Pool() { stop(); }

  int size() const { return threads_.load(std::memory_order_relaxed); }
  /// The most threads a job's chunk count can address (see job_).
  static constexpr int max_threads() { return static_cast<int>(kChunkMask); }

  void resize(int threads) {
    stop();
    threads_.store(std::clamp(threads, 1, max_threads()));  // chunks fit in job_
    // More threads than cores: a spinning thread would hold a core the one it waits for needs.
    const unsigned cores = std::thread::hardware_concurrency();
    spin_ =
        cores != 0 && static_cast<unsigned>(size()) > cores ? std::chrono::microseconds(0) : kSpin;
    quit_.store(false);
    // New workers start at the current job: it is done, not theirs to run.
    const uint64_t job = job_.load();
    for (int i = 1; i < size(); ++i) workers_.emplace_back([this, i, job] { work(i, job); });
  }

  void run(int chunks, const std::function<void(int)>& task) {
    {
      // Under the lock, so that a worker about to sleep either sees the new job in its wait
      // predicate or is already waiting when notified.
      std::lock_guard lock(mu_);
      task_ = &task;
      pending_.store(chunks - 1, std::memory_order_relaxed);
      const uint64_t generation = (job_.load(std::memory_order_relaxed) >> kChunkBits) + 1;
      job_.store(generation << kChunkBits | static_cast<uint64_t>(chunks),
                 std::memory_order_release);
    }
    wake_.notify_all();
    task(0);
    if (!spin_until(spin_, [&] { return pending_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock lock(mu_);
      done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    task_ = nullptr;
  }

 private:
  void work(int index, uint64_t seen) {
    for (;;) {
      auto fresh = [&] {
        return quit_.load(std::memory_order_acquire) ||
               job_.load(std::memory_order_acquire) != seen;
      };
      if (!spin_until(spin_, fresh)) {
        std::unique_lock lock(mu_);
        wake_.wait(lock, fresh);
      }
      if (quit_.load(std::memory_order_acquire)) return;
      // One load gives the job and its chunk count together: a worker with no chunk in this
      // job may look again only after the caller has moved on to the next one.
      seen = job_.load(std::memory_order_acquire);
      if (index >= static_cast<int>(seen & kChunkMask)) continue;
      (*task_)(index);
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        // The caller may be between its predicate check and its wait: taking the lock orders
        // this notify after it is waiting.
        std::lock_guard lock(mu_);
        done_.notify_one();
      }
    }
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      quit_.store(true, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  // The current job: a generation count above kChunkBits bits of chunk count, so a worker
  // reads both at once.
  static constexpr int kChunkBits = 16;
  static constexpr uint64_t kChunkMask = (uint64_t{1} << kChunkBits) - 1;
  std::atomic<uint64_t> job_{0};
  // Written by run() before its release store of job_, read by workers after their acquire
  // load of it; it cannot change while a worker with a chunk has not finished.
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<int> threads_{1};
  std::chrono::microseconds spin_ = kSpin;  // 0 when the pool has more threads than cores
  std::atomic<int> pending_{0};
  std::atomic<bool> quit_{false};
};

int default_threads() {
  unsigned hw = std::thread::hardware_concurrency();
  return hw ? static_cast<int>(hw) : 1;
}

Pool& pool() {
  static Pool* p = new Pool(default_threads());  // leaked on purpose: no join at exit
  return *p;
}

thread_local bool in_parallel_region = false;
std::mutex run_mu;  // one parallel job at a time; nested or concurrent callers run inline

}  // namespace

int parallel_chunks(int64_t n, int64_t grain) {
  if (n <= 0) return 0;
  int64_t by_grain = std::max<int64_t>(n / std::max<int64_t>(grain, 1), 1);
  return static_cast<int>(std::min<int64_t>(by_grain, pool().size()));
}

namespace detail {
void parallel_run(int64_t n, int chunks, const std::function<void(int64_t, int64_t)>& fn) {
  if (in_parallel_region) {
    fn(0, n);
    return;
  }
  std::unique_lock lock(run_mu, std::try_to_lock);
  // Nested or concurrent callers, and a pool resized since `chunks` was counted, run inline.
  if (!lock.owns_lock() || chunks > pool().size()) {
    fn(0, n);
    return;
  }
  // Every chunk runs to its end even if another throws (the pool must see all of them
  // finish); the first exception is rethrown here, on the caller's thread.
  std::exception_ptr error;
  std::mutex error_mu;
  std::function<void(int)> task = [&](int c) {
    struct Region {
      Region() { in_parallel_region = true; }
      ~Region() { in_parallel_region = false; }
    } region;
    try {
      fn(n * c / chunks, n * (c + 1) / chunks);
    } catch (...) {
      std::lock_guard guard(error_mu);
      if (!error) error = std::current_exception();
    }
  };
  pool().run(chunks, task);
  if (error) std::rethrow_exception(error);
}
}  // namespace detail

void set_num_threads(int n) {
  // As PyTorch: no "default" spelling; 0 and negative counts are mistakes, not 1 thread.
  ADJOINT_CHECK(n >= 1 && n <= Pool::max_threads(), Value, "set_num_threads",
                "the number of threads must be in [1, ", Pool::max_threads(), "], got ", n);
  ADJOINT_CHECK(!in_parallel_region, Value, "set_num_threads",
                "cannot change the thread count from inside a parallel kernel");
  std::lock_guard lock(run_mu);  // not while a job runs: its workers must finish it
  pool().resize(n);
  openblas_set_num_threads(n);
}

int get_num_threads() { return pool().size(); }

}  // namespace adjoint
