// nn::SyncBatchNorm against one process running nn::BatchNorm1d/2d on the whole batch (every
// rank's seeded input concatenated): outputs, input gradients, the parameter gradients summed
// over ranks, the running estimates after two steps, evaluation, ranks with different batch
// sizes (one empty), and double backward. Float64 within 1e-12. Label unit (one process) and
// mpi (two).
#include <gtest/gtest.h>

#include "adjoint/distributed/sync_batchnorm.h"
#include "distributed/dist_support.h"

namespace adjoint::testing {
namespace {

// Rank r's batch: rows(r) examples of [C, *spatial].
struct Batches {
  std::vector<int64_t> rows;  // per rank
  Shape tail;                 // [C, *spatial]
  Tensor input(int r, int salt) const {
    Shape s = tail;
    s.insert(0, rows[static_cast<std::size_t>(r)]);
    return rank_input(r, s, DType::Float64, salt);
  }
  Tensor all(int salt) const {
    std::vector<Tensor> xs;
    for (int r = 0; r < pg().world_size(); ++r) xs.push_back(input(r, salt));
    return cat(xs, 0);
  }
  int64_t offset(int r) const {
    int64_t o = 0;
    for (int q = 0; q < r; ++q) o += rows[static_cast<std::size_t>(q)];
    return o;
  }
};

// A parameter gradient summed over the ranks (what data parallelism all-reduces).
Tensor rank_total(const Tensor& g) {
  Tensor t = g.detach().clone();
  pg().all_reduce(t);
  return t;
}

template <class Oracle>
void check_against_one_process(const Batches& b, std::optional<double> momentum) {
  const int r = pg().rank();
  const int64_t c = b.tail[0];
  nn::SyncBatchNorm sync(c, 1e-5, momentum);
  Oracle whole(c, 1e-5, momentum);
  for (nn::Module* m : {static_cast<nn::Module*>(&sync), static_cast<nn::Module*>(&whole)}) {
    m->to(DType::Float64);
    NoGradGuard no_grad;  // non-trivial affine parameters, the same on both
    Generator gen(5);
    for (Tensor p : m->parameters()) p.copy_(randn(p.shape(), DType::Float64, &gen));
  }
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    sync.zero_grad();
    whole.zero_grad();
    const Tensor x = b.input(r, step).requires_grad_(true);
    const Tensor y = sync.forward(x);
    (y * b.input(r, 10 + step)).sum().backward();
    const Tensor xa = b.all(step).requires_grad_(true);
    const Tensor ya = whole.forward(xa);
    (ya * b.all(10 + step)).sum().backward();
    const int64_t rows = b.rows[static_cast<std::size_t>(r)];
    expect_close(y, ya.narrow(0, b.offset(r), rows), 1e-12);
    expect_close(x.grad(), xa.grad().narrow(0, b.offset(r), rows), 1e-12);
    expect_close(rank_total(sync.weight.grad()), whole.weight.grad(), 1e-12);
    expect_close(rank_total(sync.bias.grad()), whole.bias.grad(), 1e-12);
    expect_close(sync.running_mean, whole.running_mean, 1e-12);
    expect_close(sync.running_var, whole.running_var, 1e-12);
    EXPECT_EQ(sync.num_batches_tracked.item<int64_t>(), step + 1);
  }
  sync.eval();
  whole.eval();
  const Tensor x = b.input(r, 7);
  expect_close(sync.forward(x), whole.forward(x), 1e-12);
}

TEST(SyncBatchNorm, MatchesBatchNormOnTheWholeBatch) {
  const int64_t w = pg().world_size();
  check_against_one_process<nn::BatchNorm1d>({std::vector<int64_t>(w, 3), {4, 5}}, 0.1);
  check_against_one_process<nn::BatchNorm2d>({std::vector<int64_t>(w, 2), {3, 2, 3}}, 0.1);
  check_against_one_process<nn::BatchNorm1d>({std::vector<int64_t>(w, 4), {3}}, std::nullopt);
}

TEST(SyncBatchNorm, RanksWithDifferentBatchSizesOneEmpty) {
  // Rank 0 holds 5 examples, rank 1 none, rank 2 one, ...
  std::vector<int64_t> rows;
  for (int q = 0; q < pg().world_size(); ++q) rows.push_back(q == 0 ? 5 : q - 1);
  check_against_one_process<nn::BatchNorm1d>({rows, {3, 2}}, 0.1);
}

// The gradient of |dL/dx|² with respect to x: the second derivative through both all-reduces.
TEST(SyncBatchNorm, DoubleBackwardMatchesTheWholeBatch) {
  const int r = pg().rank();
  const Batches b{std::vector<int64_t>(pg().world_size(), 3), {2, 4}};
  nn::SyncBatchNorm sync(2);
  nn::BatchNorm1d whole(2);
  sync.to(DType::Float64);
  whole.to(DType::Float64);
  auto grad_of_grad_norm = [&](nn::Module& m, const Tensor& x_in, const Tensor& v) {
    const Tensor x = x_in.detach().requires_grad_(true);
    const Tensor gx = autograd::grad({(m.forward(x).tanh() * v).sum()}, {x}, {}, true, true)[0];
    return autograd::grad({gx.square().sum()}, {x})[0];
  };
  const Tensor got = grad_of_grad_norm(sync, b.input(r, 0), b.input(r, 1));
  // The global loss is the sum of the ranks' squared gradient norms: the oracle's over the
  // whole batch.
  const Tensor want = grad_of_grad_norm(whole, b.all(0), b.all(1));
  expect_close(got, want.narrow(0, b.offset(r), 3), 1e-12);
}

TEST(SyncBatchNorm, ErrorsNameTheModule) {
  nn::SyncBatchNorm bn(3);
  try {
    bn.forward(zeros({2, 4}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nn.SyncBatchNorm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[2, 4]"), std::string::npos) << e.what();
  }
  try {
    bn.forward(zeros({3}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2D"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace adjoint::testing
