// The differentiable collectives: forward values, VJPs and JVPs against single-process
// oracles built from every rank's seeded inputs, the distributed gradcheck of each (and of a
// small model-parallel layer), and double backward. Label unit (one process) and mpi (two).
#include <gtest/gtest.h>

#include "distributed/dist_support.h"
#include "support/expect.h"

namespace adjoint::testing {
namespace {

using dist::ReduceOp;

// Cotangent v_r of rank r and tangent t_r (seeded, so every rank knows everyone's).
Tensor cot(int r, const Shape& s) { return rank_input(r, s, DType::Float64, 40); }
Tensor tan_(int r, const Shape& s) { return rank_input(r, s, DType::Float64, 41); }

// Runs backward of sum(y * v_rank) and returns x.grad.
Tensor vjp_of(const std::function<Tensor(const Tensor&)>& f, const Shape& in) {
  Tensor x = rank_input(pg().rank(), in).requires_grad_(true);
  Tensor y = f(x);
  (y * cot(pg().rank(), y.shape())).sum().backward();
  return x.grad();
}

Tensor jvp_of(const std::function<Tensor(const Tensor&)>& f, const Shape& in) {
  DualLevel level;
  Tensor x = make_dual(rank_input(pg().rank(), in), tan_(pg().rank(), in));
  return unpack_dual(f(x)).second;
}

std::vector<Tensor> all_of(const std::function<Tensor(int, const Shape&)>& g, const Shape& s) {
  std::vector<Tensor> out;
  for (int r = 0; r < pg().world_size(); ++r) out.push_back(g(r, s));
  return out;
}

TEST(DifferentiableAllReduce, SumAndAverage) {
  const double n = pg().world_size();
  const Shape s{2, 3};
  Tensor y = dist::all_reduce(rank_input(pg().rank(), s));
  expect_close(y, rank_sum(all_inputs(s)), 1e-13);
  // y = sum_r x_r on every rank and L = sum_r <v_r, y>: dL/dx_r = sum_s v_s.
  expect_close(vjp_of([](const Tensor& x) { return dist::all_reduce(x); }, s),
               rank_sum(all_of(cot, s)), 1e-13);
  expect_close(jvp_of([](const Tensor& x) { return dist::all_reduce(x); }, s),
               rank_sum(all_of(tan_, s)), 1e-13);
  auto avg = [](const Tensor& x) { return dist::all_reduce(x, ReduceOp::Average); };
  expect_close(vjp_of(avg, s), rank_sum(all_of(cot, s)) / n, 1e-13);
  expect_close(jvp_of(avg, s), rank_sum(all_of(tan_, s)) / n, 1e-13);
}

TEST(DifferentiableAllReduce, MaxRoutesTheCotangentToTheWinnersSplittingTies) {
  const Shape s{6};
  // Element 0 ties on every rank; the others have one winner.
  auto input = [](int r) {
    Tensor x = rank_input(r, {6});
    x.data_ptr<double>()[0] = 5.0;
    return x;
  };
  const int n = pg().world_size();
  std::vector<Tensor> xs;
  for (int r = 0; r < n; ++r) xs.push_back(input(r));
  Tensor mx = xs[0];
  for (const Tensor& t : xs) mx = maximum(mx, t);
  Tensor count = zeros(s, DType::Float64);
  for (const Tensor& t : xs) count = count + t.eq(mx).to(DType::Float64);
  Tensor w = input(pg().rank()).eq(mx).to(DType::Float64) / count;

  Tensor x = input(pg().rank()).requires_grad_(true);
  Tensor y = dist::all_reduce(x, ReduceOp::Max);
  expect_close(y.detach(), mx, 0);
  (y * cot(pg().rank(), s)).sum().backward();
  expect_close(x.grad(), w * rank_sum(all_of(cot, s)), 1e-13);
  EXPECT_NEAR(x.grad().to_vector<double>()[0], rank_sum(all_of(cot, s)).to_vector<double>()[0] / n,
              1e-13);

  DualLevel level;
  Tensor xd = make_dual(input(pg().rank()), tan_(pg().rank(), s));
  std::vector<Tensor> wt;
  for (int r = 0; r < n; ++r) wt.push_back(xs[r].eq(mx).to(DType::Float64) / count * tan_(r, s));
  expect_close(unpack_dual(dist::all_reduce(xd, ReduceOp::Max)).second, rank_sum(wt), 1e-13);
}

TEST(DifferentiableAllGather, VjpIsReduceScatterOfTheCotangent) {
  const int n = pg().world_size(), r = pg().rank();
  const Shape s{2, 3}, out{2 * n, 3};
  expect_close(dist::all_gather(rank_input(r, s)), cat(all_inputs(s), 0), 0);
  auto f = [](const Tensor& x) { return dist::all_gather(x); };
  // dL/dx_r = sum_s (v_s)[block r].
  expect_close(vjp_of(f, s), rank_sum(all_of(cot, out)).narrow(0, 2 * r, 2), 1e-13);
  expect_close(jvp_of(f, s), cat(all_of(tan_, s), 0), 0);
}

TEST(DifferentiableReduceScatter, VjpIsAllGatherOfTheCotangent) {
  const int n = pg().world_size(), r = pg().rank();
  const Shape in{2 * n, 3}, s{2, 3};
  expect_close(dist::reduce_scatter(rank_input(r, in)),
               rank_sum(all_inputs(in)).narrow(0, 2 * r, 2), 1e-13);
  auto f = [](const Tensor& x) { return dist::reduce_scatter(x); };
  expect_close(vjp_of(f, in), cat(all_of(cot, s), 0), 1e-13);
  expect_close(jvp_of(f, in), rank_sum(all_of(tan_, in)).narrow(0, 2 * r, 2), 1e-13);
  auto avg = [](const Tensor& x) { return dist::reduce_scatter(x, ReduceOp::Average); };
  expect_close(vjp_of(avg, in), cat(all_of(cot, s), 0) / n, 1e-13);
}

TEST(DifferentiableBroadcast, RootGetsTheSumOfCotangents) {
  const int root = pg().world_size() - 1, r = pg().rank();
  const Shape s{3};
  auto f = [root](const Tensor& x) { return dist::broadcast(x, root); };
  expect_close(dist::broadcast(rank_input(r, s), root), rank_input(root, s), 0);
  Tensor want = r == root ? rank_sum(all_of(cot, s)) : zeros(s, DType::Float64);
  expect_close(vjp_of(f, s), want, 1e-13);
  expect_close(jvp_of(f, s), tan_(root, s), 0);
}

TEST(DifferentiableCollectives, DoubleBackwardThroughAllReduce) {
  // L = <v, all_reduce(x * x)>: g_r = 2 x_r * S with S = sum_s v_s; then <u, g> gives
  // d/dx_r = 2 u_r * S.
  const Shape s{4};
  Tensor x = rank_input(pg().rank(), s).requires_grad_(true);
  Tensor l = (dist::all_reduce(x * x) * cot(pg().rank(), s)).sum();
  Tensor g = autograd::grad({l}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  Tensor S = rank_sum(all_of(cot, s));
  expect_close(g.detach(), 2 * x.detach() * S, 1e-13);
  (g * tan_(pg().rank(), s)).sum().backward();
  expect_close(x.grad(), 2 * tan_(pg().rank(), s) * S, 1e-13);
}

TEST(DifferentiableCollectives, HessianVectorProductsBothWays) {
  // L = sum_r <v_r, all_reduce(x^3)>: dL/dx_r = 3 x_r^2 S with S = sum_s v_s, and the Hessian
  // is block diagonal: H t on rank r is 6 x_r t_r S. Forward over reverse runs the
  // collectives' JVP rules inside backward; reverse over reverse their double backward.
  const Shape s{5};
  Tensor x = rank_input(pg().rank(), s);
  Tensor t = tan_(pg().rank(), s);
  Tensor v = cot(pg().rank(), s);
  auto f = [&](const Tensor& xx) { return (dist::all_reduce(xx * xx * xx) * v).sum(); };
  Tensor want = 6 * x * t * rank_sum(all_of(cot, s));
  expect_close(hvp(f, x, t, HvpMode::ForwardOverReverse), want, 1e-12);
  expect_close(hvp(f, x, t, HvpMode::ReverseOverReverse), want, 1e-12);
}

TEST(DifferentiableCollectives, GradcheckUnderAllRanks) {
  const int n = pg().world_size();
  Tensor x = rank_input(pg().rank(), {2, 3}, DType::Float64, 7);
  Tensor xs = rank_input(pg().rank(), {2 * n, 2}, DType::Float64, 8);
  dist_gradcheck([](const Tensor& v) { return dist::all_reduce(v); }, x);
  dist_gradcheck([](const Tensor& v) { return dist::all_reduce(v, ReduceOp::Average); }, x);
  dist_gradcheck([](const Tensor& v) { return dist::all_reduce(v, ReduceOp::Max); }, x);
  dist_gradcheck([](const Tensor& v) { return dist::all_gather(v); }, x);
  dist_gradcheck([](const Tensor& v) { return dist::reduce_scatter(v); }, xs);
  dist_gradcheck([](const Tensor& v) { return dist::reduce_scatter(v, ReduceOp::Average); }, xs);
  dist_gradcheck([n](const Tensor& v) { return dist::broadcast(v, n - 1); }, x);
  // A row-parallel linear layer as Megatron splits it: each rank holds a slice of the input
  // features and of the weight's columns; the partial products are all-reduced.
  Tensor w = rank_input(pg().rank(), {3, 4}, DType::Float64, 9);
  dist_gradcheck([&](const Tensor& v) { return tanh(dist::all_reduce(matmul(v, w))); }, x);
  // Gather, compute, scatter back (sequence parallelism's shape).
  dist_gradcheck([](const Tensor& v) { return dist::reduce_scatter(sin(dist::all_gather(v))); }, x);
}

TEST(DifferentiableCollectives, RanksThatDisagreeOnRequiresGradFailAtForward) {
  // Rank 0 would record the all_reduce and wait in its backward for ranks that did not.
  if (pg().world_size() < 2) GTEST_SKIP() << "needs two ranks";
  Tensor x = rank_input(pg().rank(), {3}).requires_grad_(pg().rank() == 0);
  expect_error([&] { dist::all_reduce(x); }, ErrorKind::Autograd,
               {"[dist.all_reduce]", "ranks disagree on recording the call for backward",
                "rank 0 recorded it", "rank 1 did not record it"});
  // A plain call paired with a differentiable one is named too.
  Tensor y = rank_input(pg().rank(), {3});
  auto call = [&] {
    if (pg().rank() == 0)
      pg().all_gather(y);
    else
      dist::all_gather(y);
  };
  expect_error(call, ErrorKind::Autograd, {"rank 0 called the process group directly"});
  Tensor ok = ones({2}, DType::Float64);
  pg().all_reduce(ok);
  expect_close(ok, ones({2}, DType::Float64) * pg().world_size(), 0);
}

TEST(DifferentiableCollectives, InputIsNotModified) {
  Tensor x = rank_input(pg().rank(), {3});
  Tensor before = x.clone();
  dist::all_reduce(x);
  dist::broadcast(x, 0);
  expect_close(x, before, 0);
}

}  // namespace
}  // namespace adjoint::testing
