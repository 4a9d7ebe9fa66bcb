// A small persistent thread pool. Workers sleep on a condition variable between jobs (no
// spinning, which on 2 cores would starve OpenBLAS's own threads).
#include "core/parallel.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "adjoint/threading.h"

extern "C" void openblas_set_num_threads(int);

namespace adjoint {
namespace {

class Pool {
 public:
  explicit Pool(int threads) { resize(threads); }
  ~Pool() { stop(); }

  int size() const { return threads_; }

  void resize(int threads) {
    stop();
    threads_ = std::max(threads, 1);
    quit_ = false;
    // New workers start at the current generation: the last job is done, not theirs to run.
    for (int i = 1; i < threads_; ++i)
      workers_.emplace_back([this, i, gen = generation_] { work(i, gen); });
  }

  void run(int chunks, const std::function<void(int)>& task) {
    std::unique_lock lock(mu_);
    task_ = &task;
    chunks_ = chunks;
    pending_ = chunks - 1;
    ++generation_;
    lock.unlock();
    wake_.notify_all();
    task(0);
    lock.lock();
    done_.wait(lock, [&] { return pending_ == 0; });
    task_ = nullptr;
  }

 private:
  void work(int index, uint64_t seen) {
    for (;;) {
      std::unique_lock lock(mu_);
      wake_.wait(lock, [&] { return quit_ || generation_ != seen; });
      if (quit_) return;
      seen = generation_;
      if (index >= chunks_) continue;
      const auto* task = task_;
      lock.unlock();
      (*task)(index);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      quit_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
  }

  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* task_ = nullptr;
  int threads_ = 1;
  int chunks_ = 0;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool quit_ = false;
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
  if (!lock.owns_lock()) {
    fn(0, n);
    return;
  }
  std::function<void(int)> task = [&](int c) {
    in_parallel_region = true;
    int64_t begin = n * c / chunks, end = n * (c + 1) / chunks;
    fn(begin, end);
    in_parallel_region = false;
  };
  pool().run(chunks, task);
}
}  // namespace detail

void set_num_threads(int n) {
  pool().resize(n);
  openblas_set_num_threads(std::max(n, 1));
}

int get_num_threads() { return pool().size(); }

}  // namespace adjoint
