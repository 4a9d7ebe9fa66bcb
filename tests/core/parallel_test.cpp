// The thread pool behind parallel_for (src/core/parallel.cpp): every index of every job is
// run exactly once, whether the workers are spinning (jobs back to back), asleep (a pause
// longer than the spin between jobs), left without a chunk (fewer chunks than threads), or
// replaced (the pool resized between jobs); a nested parallel_for runs inline; an exception in
// any chunk reaches the caller and leaves the pool working.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "adjoint/error.h"
#include "adjoint/threading.h"
#include "core/parallel.h"

using namespace adjoint;

namespace {

// Runs one parallel_for over n items with `grain` and checks each index ran exactly once.
void expect_each_index_once(int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(n);
  parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
  });
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of " << n << ", grain " << grain;
}

class ThreadCount : public ::testing::Test {
 protected:
  ~ThreadCount() override { set_num_threads(saved_); }
  int saved_ = get_num_threads();
};

}  // namespace

TEST_F(ThreadCount, BackToBackJobsWithFewerChunksThanThreads) {
  set_num_threads(4);
  // grains giving 2, 3 or 4 chunks in turn (one chunk would run inline), so workers without a
  // chunk keep looking for the next job while others run
  for (int round = 0; round < 2000; ++round)
    expect_each_index_once(64 + round % 7, 64 / (2 + round % 3));
}

TEST_F(ThreadCount, JobsAfterTheWorkersFellAsleep) {
  set_num_threads(3);
  for (int round = 0; round < 20; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // longer than the 2 ms spin
    expect_each_index_once(1000, 10);
  }
}

TEST_F(ThreadCount, AnExceptionInAChunkReachesTheCallerAndThePoolCarriesOn) {
  set_num_threads(2);
  for (int thrower : {0, 1}) {  // the caller's chunk, then the worker's
    std::atomic<int> finished{0};
    EXPECT_THROW(parallel_for(2, 1,
                              [&](int64_t begin, int64_t) {
                                if (begin == thrower) throw std::runtime_error("chunk failed");
                                finished.fetch_add(1);
                              }),
                 std::runtime_error);
    EXPECT_EQ(finished.load(), 1) << "the other chunk still ran to its end";
    // Still two threads at work afterwards: the caller left its parallel region.
    std::vector<std::thread::id> ids(2);
    parallel_for(2, 1, [&](int64_t begin, int64_t) {
      ids[begin] = std::this_thread::get_id();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    EXPECT_NE(ids[0], ids[1]);
    expect_each_index_once(1000, 10);
  }
}

TEST_F(ThreadCount, SetNumThreadsInsideAKernelIsAnError) {
  set_num_threads(2);
  EXPECT_THROW(parallel_for(2, 1, [](int64_t, int64_t) { set_num_threads(1); }), Error);
  EXPECT_EQ(get_num_threads(), 2);
}

TEST_F(ThreadCount, ResizedBetweenJobs) {
  for (int threads : {1, 3, 2, 4, 1, 2}) {
    set_num_threads(threads);
    EXPECT_EQ(get_num_threads(), threads);
    for (int round = 0; round < 200; ++round) expect_each_index_once(100, 1);
  }
}

TEST_F(ThreadCount, NestedParallelForRunsInline) {
  set_num_threads(2);
  std::vector<std::atomic<int>> hits(100 * 50);
  std::atomic<int> elsewhere{0};
  parallel_for(100, 1, [&](int64_t begin, int64_t end) {
    const auto outer = std::this_thread::get_id();
    for (int64_t i = begin; i < end; ++i)
      parallel_for(50, 1, [&](int64_t b, int64_t e) {
        if (std::this_thread::get_id() != outer) elsewhere.fetch_add(1);
        for (int64_t j = b; j < e; ++j) hits[i * 50 + j].fetch_add(1);
      });
  });
  for (const auto& h : hits) ASSERT_EQ(h.load(), 1);
  EXPECT_EQ(elsewhere.load(), 0) << "a nested parallel_for left its thread";
}
