// Helpers of the distributed tests: each rank's input from a seed, so any rank can compute
// what the others hold and build a single-process oracle; tensor comparison; and a gradcheck
// of a function whose inputs and outputs live on all ranks (Note [Distributed gradcheck]).
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/distributed.h"
#include "adjoint/nn.h"

namespace adjoint::testing {

inline dist::ProcessGroup& pg() { return dist::default_group(); }

/// What rank r holds for `salt`: seeded normals (float) or integers in [-50, 50) (int64).
inline Tensor rank_input(int r, const Shape& shape, DType dtype = DType::Float64, int salt = 0) {
  Generator gen(1000 + 17 * static_cast<uint64_t>(salt) + static_cast<uint64_t>(r));
  if (dtype == DType::Int64) return randint(-50, 50, shape, &gen);
  return randn(shape, dtype, &gen);
}

/// Every rank's input, rank order.
inline std::vector<Tensor> all_inputs(const Shape& shape, DType dtype = DType::Float64,
                                      int salt = 0) {
  std::vector<Tensor> xs;
  for (int r = 0; r < pg().world_size(); ++r) xs.push_back(rank_input(r, shape, dtype, salt));
  return xs;
}

/// Elementwise sum in rank order: the oracle of all_reduce(sum).
inline Tensor rank_sum(const std::vector<Tensor>& xs) {
  Tensor s = xs[0].clone();
  for (std::size_t r = 1; r < xs.size(); ++r) s = s + xs[r];
  return s;
}

/// A small MLP [3, 8, 8, 2] with tanh and biases, seeded, in `dtype`: the data-parallel tests'
/// model.
inline std::shared_ptr<nn::MLP> small_mlp(uint64_t seed, DType dtype) {
  Generator gen(seed);
  auto m =
      std::make_shared<nn::MLP>(std::vector<int64_t>{3, 8, 8, 2}, nn::Activation::Tanh, true, &gen);
  m->to(dtype);
  return m;
}

/// Mean squared error of m(x) against y.
inline Tensor mse(nn::Module& m, const Tensor& x, const Tensor& y) {
  return (m.forward(x) - y).square().mean();
}

inline void expect_close(const Tensor& got, const Tensor& want, double tol) {
  ASSERT_TRUE(got.defined());
  ASSERT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.dtype(), want.dtype());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], w[i], tol * (1 + std::abs(w[i]))) << "element " << i;
}

/// Each tensor is bitwise the same on every rank (gathered and compared with rank 0's copy).
inline void expect_same_on_every_rank(const std::vector<Tensor>& tensors) {
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    Tensor all = pg().all_gather(tensors[i].detach().reshape({1, -1}));
    for (int q = 1; q < pg().world_size(); ++q)
      EXPECT_EQ(all.select(0, q).to_vector<double>(), all.select(0, 0).to_vector<double>())
          << "tensor " << i << " differs between rank 0 and rank " << q;
  }
}

// Note [Distributed gradcheck]
// gradcheck() perturbs one process's inputs and reads one process's outputs; a collective's
// Jacobian couples every rank's inputs to every rank's outputs. So the global Jacobian J, rows
// (rank s, output i), columns (rank r, input j), is built both ways on every rank in lockstep:
// numerically, column by column, with only rank r perturbing its element j while all ranks
// run f; analytically, row by row, with only rank s seeding the cotangent of its output i
// while all ranks run backward. Each rank holds a slab of each; all_gather assembles them, so
// every rank compares the whole J (and J t for random tangents t through forward mode).
using DistFn = std::function<Tensor(const Tensor&)>;

inline Tensor dist_jacobian_numeric(const DistFn& f, const Tensor& x, double eps) {
  const int world = pg().world_size(), rank = pg().rank();
  const int64_t n = x.numel();
  Tensor y0;
  {
    NoGradGuard no_grad;
    y0 = f(x);
  }
  const int64_t m = y0.numel();
  Tensor cols = zeros({world * n, m}, DType::Float64);  // this rank's rows, as columns
  for (int r = 0; r < world; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      Tensor plus = x.detach().clone(), minus = x.detach().clone();
      if (rank == r) {
        plus.reshape({-1}).data_ptr<double>()[j] += eps;
        minus.reshape({-1}).data_ptr<double>()[j] -= eps;
      }
      NoGradGuard no_grad;
      Tensor d = (f(plus) - f(minus)) / (2 * eps);
      cols.select(0, r * n + j).copy_(d.reshape({-1}));
    }
  }
  // [world*n, m] per rank -> J [world*m, world*n]
  Tensor gathered = pg().all_gather(cols.transpose(0, 1).contiguous());  // [world*m, world*n]
  return gathered;
}

inline Tensor dist_jacobian_analytic(const DistFn& f, const Tensor& x) {
  const int world = pg().world_size(), rank = pg().rank();
  Tensor xg = x.detach().clone().requires_grad_(true);
  Tensor y = f(xg);
  const int64_t m = y.numel(), n = x.numel();
  Tensor rows = zeros({world * m, n}, DType::Float64);  // d y_(s,i) / d x_(this rank)
  for (int s = 0; s < world; ++s) {
    for (int64_t i = 0; i < m; ++i) {
      Tensor seed = zeros(y.shape(), DType::Float64);
      if (rank == s) seed.reshape({-1}).data_ptr<double>()[i] = 1;
      Tensor gx = autograd::grad({y}, {xg}, {seed}, /*retain_graph=*/true)[0];
      rows.select(0, s * m + i).copy_(gx.reshape({-1}));
    }
  }
  // [world*m, n] per rank -> J^T blocks [world*n, world*m] -> J
  return pg().all_gather(rows.transpose(0, 1).contiguous()).transpose(0, 1).contiguous();
}

/// J t for the tangents t_r = rank_input(r, salt) through forward mode, gathered [world*m].
inline Tensor dist_jvp(const DistFn& f, const Tensor& x, int salt) {
  DualLevel level;
  Tensor t = rank_input(pg().rank(), x.shape(), DType::Float64, salt);
  Tensor y = f(make_dual(x.detach(), t));
  return pg().all_gather(unpack_dual(y).second.reshape({-1}));
}

/// Compares the analytic Jacobian (reverse mode), J t (forward mode) and central differences
/// for f at x (float64, this rank's input).
inline void dist_gradcheck(const DistFn& f, const Tensor& x, double tol = 1e-7) {
  Tensor numeric = dist_jacobian_numeric(f, x, 1e-6);
  Tensor analytic = dist_jacobian_analytic(f, x);
  expect_close(analytic, numeric, tol);
  const int world = pg().world_size();
  std::vector<Tensor> ts;
  for (int r = 0; r < world; ++r)
    ts.push_back(rank_input(r, x.shape(), DType::Float64, 99).reshape({-1}));
  Tensor t_all = cat(ts, 0);
  expect_close(dist_jvp(f, x, 99), matmul(numeric, t_all), tol);
}

}  // namespace adjoint::testing
