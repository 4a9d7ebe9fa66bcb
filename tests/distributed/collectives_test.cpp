// The process group's collectives, blocking and asynchronous, against single-process oracles
// (every rank rebuilds the others' inputs from their seeds), and the cross-rank checks that
// turn a mismatched call into the same Error on every rank. Runs as one process (label unit)
// and under mpirun -np 2 (label mpi).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "distributed/backends.h"
#include "distributed/dist_support.h"
#include "support/expect.h"

namespace adjoint::testing {
namespace {

using dist::ReduceOp;

TEST(ProcessGroup, RankAndWorldSizeMatchTheLauncher) {
  EXPECT_GE(pg().rank(), 0);
  EXPECT_LT(pg().rank(), pg().world_size());
  if (const char* size = std::getenv("OMPI_COMM_WORLD_SIZE")) {
    EXPECT_EQ(pg().world_size(), std::atoi(size));
    EXPECT_EQ(pg().rank(), std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")));
    EXPECT_EQ(pg().backend_name(), "mpi");
  } else {
    EXPECT_EQ(pg().world_size(), 1);  // no launcher: one process, exactly as without MPI
    EXPECT_EQ(pg().backend_name(), "local");
  }
}

class AllReduce : public ::testing::TestWithParam<DType> {};

// The tolerance of a sum over ranks: float16/bfloat16 sums round at every step, as their
// oracle (rank_sum in the same dtype) does, so with two ranks the two agree exactly.
double sum_tol(DType dt) {
  if (is_reduced_float(dt)) return pg().world_size() <= 2 ? 0.0 : 8 * dtype_eps(dt);
  return dt == DType::Float32 ? 1e-6 : 1e-13;
}

TEST_P(AllReduce, SumAverageMaxMatchTheOracle) {
  const DType dt = GetParam();
  const double tol = sum_tol(dt);
  auto xs = all_inputs({3, 5}, dt);
  Tensor x = rank_input(pg().rank(), {3, 5}, dt);

  Tensor sum = x.clone();
  pg().all_reduce(sum, ReduceOp::Sum);
  expect_close(sum, rank_sum(xs), tol);

  Tensor mx = x.clone();
  pg().all_reduce(mx, ReduceOp::Max);
  Tensor want_max = xs[0];
  for (const Tensor& t : xs) want_max = maximum(want_max, t);
  expect_close(mx, want_max, 0);

  if (is_floating(dt)) {
    Tensor avg = x.clone();
    pg().all_reduce(avg, ReduceOp::Average);
    expect_close(avg, rank_sum(xs) / static_cast<double>(pg().world_size()), tol);
  }
}

TEST_P(AllReduce, AsyncResultsMatchBlockingOnesAndOverlapWork) {
  const DType dt = GetParam();
  auto xs = all_inputs({64}, dt, 1);
  std::vector<Tensor> bufs;
  std::vector<dist::Work> works;
  for (int k = 0; k < 4; ++k) bufs.push_back(rank_input(pg().rank(), {64}, dt, 1) * (k + 1));
  for (Tensor& b : bufs) works.push_back(pg().all_reduce_async(b, ReduceOp::Sum));
  // The caller computes while the communication thread reduces.
  Tensor busy = rank_input(0, {128, 128}, DType::Float64, 2);
  busy = matmul(busy, busy);
  for (int k = 0; k < 4; ++k) {
    Tensor got = works[k].result();
    EXPECT_TRUE(got.is_same(bufs[k]));  // in place
    EXPECT_TRUE(works[k].is_completed());
    std::vector<Tensor> scaled;  // each rank's buffer, rounded as that rank rounded it
    for (const Tensor& x : xs) scaled.push_back(x * (k + 1));
    expect_close(got, rank_sum(scaled), sum_tol(dt));
  }
}

// The point about OpenMPI: it moves data only inside MPI calls. Here the callers make
// none after queueing (is_completed() only reads a flag), so the collective can finish only
// if something else drives it: the communication thread.
TEST(AsyncCollectives, ProgressWhileTheCallerMakesNoMPICalls) {
  Tensor x = rank_input(pg().rank(), {1 << 16}, DType::Float64, 10);
  dist::Work w = pg().all_reduce_async(x);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  volatile double busy = 0;  // the caller's own work meanwhile
  while (!w.is_completed() && std::chrono::steady_clock::now() < deadline)
    busy = busy + std::sqrt(busy + 1.0);
  ASSERT_TRUE(w.is_completed()) << "the all_reduce made no progress in 60 s";
  expect_close(x, rank_sum(all_inputs({1 << 16}, DType::Float64, 10)), 1e-13);
}

// Many collectives of every kind in flight at once, waited for in reverse order: the queue
// keeps the call order (the kinds are drawn from a seed every rank shares, so every rank
// issues the same sequence), and each result matches its oracle.
TEST(AsyncCollectives, ManyMixedCallsInFlightCompleteCorrectly) {
  const int n = pg().world_size(), me = pg().rank();
  Generator shared(77);
  struct Pending {
    dist::Work work;
    Tensor want;
  };
  std::vector<Pending> pending;
  for (int i = 0; i < 40; ++i) {
    const int kind = static_cast<int>(shared.next_u64() % 5);
    const int64_t rows = 1 + static_cast<int64_t>(shared.next_u64() % 4);
    const Shape s{rows * n, 3};
    auto xs = all_inputs(s, DType::Float64, 100 + i);
    Tensor x = rank_input(me, s, DType::Float64, 100 + i);
    switch (kind) {
      case 0:
        pending.push_back({pg().all_reduce_async(x, ReduceOp::Average), rank_sum(xs) / n});
        break;
      case 1: {
        const int root = i % n;
        pending.push_back({pg().broadcast_async(x, root), xs[root]});
        break;
      }
      case 2:
        pending.push_back({pg().all_gather_async(x), cat(xs, 0)});
        break;
      case 3:
        pending.push_back({pg().reduce_scatter_async(x), rank_sum(xs).narrow(0, me * rows, rows)});
        break;
      default:
        pending.push_back({pg().barrier_async(), Tensor()});
    }
  }
  for (auto it = pending.rbegin(); it != pending.rend(); ++it) {
    Tensor got = it->work.result();
    if (it->want.defined()) expect_close(got, it->want, 1e-13);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, AllReduce,
                         ::testing::Values(DType::Float32, DType::Float64, DType::Int64,
                                           DType::Float16, DType::BFloat16));

TEST(AllReduceMax, PropagatesNaNFromAnyRank) {
  Tensor x = rank_input(pg().rank(), {4});
  if (pg().rank() == pg().world_size() - 1) x.data_ptr<double>()[2] = std::nan("");
  pg().all_reduce(x, ReduceOp::Max);
  EXPECT_TRUE(std::isnan(x.to_vector<double>()[2]));
  EXPECT_FALSE(std::isnan(x.to_vector<double>()[1]));
}

TEST(AllReduce, BumpsTheVersionLikeAnInPlaceOp) {
  Tensor x = rank_input(pg().rank(), {2});
  const uint64_t v = x.version();
  pg().all_reduce(x);
  EXPECT_GT(x.version(), v);
}

TEST(Broadcast, EveryRankGetsTheRootsTensor) {
  for (int root = 0; root < pg().world_size(); ++root) {
    Tensor x = rank_input(pg().rank(), {2, 3}, DType::Float32, 3);
    pg().broadcast(x, root);
    expect_close(x, rank_input(root, {2, 3}, DType::Float32, 3), 0);
    Tensor flags = rank_input(pg().rank(), {5}, DType::Int64, 4).gt(zeros({5}, DType::Int64));
    dist::Work w = pg().broadcast_async(flags, root);
    w.wait();
    expect_close(
        flags.to(DType::Int64),
        rank_input(root, {5}, DType::Int64, 4).gt(zeros({5}, DType::Int64)).to(DType::Int64), 0);
  }
}

TEST(AllGather, StacksTheRanksAlongDimZeroInRankOrder) {
  auto xs = all_inputs({2, 3}, DType::Float64, 5);
  Tensor x = rank_input(pg().rank(), {2, 3}, DType::Float64, 5);
  expect_close(pg().all_gather(x), cat(xs, 0), 0);
  // Non-contiguous input and the asynchronous form.
  Tensor xt = rank_input(pg().rank(), {3, 2}, DType::Float64, 5).transpose(0, 1);
  std::vector<Tensor> ts;
  for (int r = 0; r < pg().world_size(); ++r)
    ts.push_back(rank_input(r, {3, 2}, DType::Float64, 5).transpose(0, 1));
  expect_close(pg().all_gather_async(xt).result(), cat(ts, 0), 0);
  // A 0-d tensor counts as [1].
  Tensor s = scalar_tensor(static_cast<double>(pg().rank() + 1), DType::Float64);
  std::vector<double> want;
  for (int r = 0; r < pg().world_size(); ++r) want.push_back(r + 1);
  expect_values(pg().all_gather(s), want);
}

TEST(ReduceScatter, EachRankGetsItsBlockOfTheSum) {
  const int n = pg().world_size();
  auto xs = all_inputs({2 * n, 3}, DType::Float64, 6);
  Tensor x = rank_input(pg().rank(), {2 * n, 3}, DType::Float64, 6);
  Tensor want = rank_sum(xs).narrow(0, 2 * pg().rank(), 2);
  expect_close(pg().reduce_scatter(x), want, 1e-13);
  expect_close(pg().reduce_scatter_async(x, ReduceOp::Average).result(), want / n, 1e-13);
  Tensor want_max = xs[0];
  for (const Tensor& t : xs) want_max = maximum(want_max, t);
  expect_close(pg().reduce_scatter(x, ReduceOp::Max), want_max.narrow(0, 2 * pg().rank(), 2), 0);
}

// Tensors past one MPI call's count go in pieces (Note [Counts past int]); a limit of 5
// elements or bytes reaches those paths with small tensors. The local backend ignores it.
TEST(LargeTensors, GoInPiecesWithTheSameResults) {
  struct Limit {
    int64_t saved = dist::detail::max_count_per_call().exchange(5);
    ~Limit() { dist::detail::max_count_per_call() = saved; }
  } limit;
  const int n = pg().world_size(), me = pg().rank();
  const Shape s{3 * n, 7};  // 21 n elements: not a multiple of the piece
  auto xs = all_inputs(s, DType::Float64, 30);
  Tensor x = rank_input(me, s, DType::Float64, 30);
  Tensor sum = x.clone();
  pg().all_reduce(sum);
  expect_close(sum, rank_sum(xs), 1e-13);
  Tensor mx = x.clone();
  pg().all_reduce(mx, ReduceOp::Max);
  Tensor want_max = xs[0];
  for (const Tensor& t : xs) want_max = maximum(want_max, t);
  expect_close(mx, want_max, 0);
  Tensor b = x.clone();
  pg().broadcast(b, n - 1);
  expect_close(b, xs[n - 1], 0);
  expect_close(pg().all_gather(x), cat(xs, 0), 0);
  expect_close(pg().reduce_scatter(x, ReduceOp::Average), rank_sum(xs).narrow(0, 3 * me, 3) / n,
               1e-13);
  Tensor ints = rank_input(me, {11}, DType::Int64, 31);
  expect_close(pg().all_gather(ints), cat(all_inputs({11}, DType::Int64, 31), 0), 0);
}

TEST(Barrier, BlockingAndAsync) {
  pg().barrier();
  dist::Work w = pg().barrier_async();
  w.wait();
  EXPECT_TRUE(w.is_completed());
  EXPECT_TRUE(dist::Work().is_completed());  // an empty handle is done
}

// ---- refusals and cross-rank mismatches: every rank raises, and the group goes on working ----

void expect_group_still_works() {
  Tensor x = ones({3}, DType::Float64);
  pg().all_reduce(x);
  expect_close(x, ones({3}, DType::Float64) * pg().world_size(), 0);
}

TEST(ProcessGroupErrors, ShapesThatDifferAcrossRanksAreNamedOnEveryRank) {
  if (pg().world_size() < 2) GTEST_SKIP() << "needs two ranks";
  Tensor x = zeros({2 + pg().rank(), 3}, DType::Float32);
  expect_error([&] { pg().all_reduce(x); }, ErrorKind::Shape,
               {"[dist.all_reduce]", "ranks passed different shapes", "rank 0 [2, 3] (float32)",
                "rank 1 [3, 3] (float32)"});
  expect_group_still_works();
}

TEST(ProcessGroupErrors, DTypesThatDifferAcrossRanksAreNamed) {
  if (pg().world_size() < 2) GTEST_SKIP() << "needs two ranks";
  Tensor x = zeros({4}, pg().rank() == 0 ? DType::Float32 : DType::Float64);
  expect_error(
      [&] { pg().all_gather(x); }, ErrorKind::DType,
      {"[dist.all_gather]", "different dtypes", "rank 0 [4] (float32)", "rank 1 [4] (float64)"});
  expect_group_still_works();
}

TEST(ProcessGroupErrors, DifferentCollectivesAtTheSamePointAreNamed) {
  if (pg().world_size() < 2) GTEST_SKIP() << "needs two ranks";
  Tensor x = zeros({4}, DType::Float64);
  auto call = [&] {
    if (pg().rank() == 0)
      pg().all_reduce(x);
    else
      pg().broadcast(x, 0);
  };
  expect_error(call, ErrorKind::Value,
               {"ranks called different collectives", "rank 0 all_reduce", "rank 1 broadcast"});
  expect_group_still_works();
}

TEST(ProcessGroupErrors, ARankThatRefusesTheCallTellsTheOthers) {
  // Rank 0 asks for the average of int64 (refused there); the others' valid calls fail too
  // instead of waiting for rank 0 forever.
  Tensor x = zeros({4}, pg().rank() == 0 ? DType::Int64 : DType::Float64);
  if (pg().rank() == 0) {
    expect_error([&] { pg().all_reduce(x, ReduceOp::Average); }, ErrorKind::DType,
                 {"[dist.all_reduce]", "cannot average [4] (int64)", "float32, float64"});
  } else {
    expect_error([&] { pg().all_reduce(x, ReduceOp::Average); }, ErrorKind::Value,
                 {"[dist.all_reduce]", "rank 0 refused its all_reduce call", "[4] (float64)"});
  }
  expect_group_still_works();
}

TEST(ProcessGroupErrors, LocalRefusalsNameTheOpAndTheTensor) {
  Tensor nc = zeros({3, 4}, DType::Float64).transpose(0, 1);
  expect_error([&] { pg().all_reduce(nc); }, ErrorKind::Value,
               {"[dist.all_reduce]", "contiguous", "[4, 3] (float64)"});
  Tensor b = zeros({3}, DType::Bool);
  expect_error([&] { pg().all_reduce(b); }, ErrorKind::DType, {"cannot sum [3] (bool)"});
  Tensor scalar = scalar_tensor(1.0, DType::Float64);
  expect_error([&] { pg().reduce_scatter(scalar); }, ErrorKind::Shape,
               {"[dist.reduce_scatter]", "dim 0 of [] (float64) must be a multiple"});
  if (pg().world_size() > 1) {
    Tensor odd = zeros({2 * pg().world_size() + 1}, DType::Float64);
    expect_error([&] { pg().reduce_scatter(odd); }, ErrorKind::Shape,
                 {"[dist.reduce_scatter]", "must be a multiple of the world size"});
  }
  Tensor x = zeros({2}, DType::Float64);
  expect_error([&] { pg().broadcast(x, pg().world_size()); }, ErrorKind::Index,
               {"[dist.broadcast]", "is not a rank of this group"});
  expect_error([&] { pg().all_gather(Tensor()); }, ErrorKind::Value, {"undefined"});
  expect_group_still_works();
}

// check_shapes = false: no descriptor exchange, so a refusal throws before anything is queued.
// On the local backend (world size 1), which every process can build beside the default group.
TEST(ProcessGroupWithoutChecks, RefusalsThrowAtOnceAndValidCallsWork) {
  dist::ProcessGroup local(dist::detail::make_local_backend(), /*check_shapes=*/false);
  EXPECT_EQ(local.world_size(), 1);
  Tensor b = zeros({3}, DType::Bool);
  expect_error([&] { local.all_reduce(b); }, ErrorKind::DType, {"[dist.all_reduce]", "cannot sum"});
  Tensor x = rank_input(0, {2, 2});
  expect_close(local.all_gather(x), x, 0);
  expect_close(local.reduce_scatter_async(x, ReduceOp::Average).result(), x, 0);
  Tensor y = x.clone();
  local.all_reduce(y, ReduceOp::Max);
  expect_close(y, x, 0);
}

TEST(ProcessGroupErrors, InitTwiceIsRefused) {
  expect_error([] { dist::init(); }, ErrorKind::Value, {"[dist.init]", "already running"});
}

}  // namespace
}  // namespace adjoint::testing
