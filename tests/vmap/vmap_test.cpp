// vmap against its oracle, a loop over the batch stacked: pointwise and broadcasting ops,
// reductions, views, matmul, layer norm and cross entropy; in_dims and out_dims of every kind;
// per-example gradients (vmap(grad)) against a loop of grad, grad(vmap) against grad of the
// loop, jvp in both orders, nested vmap, chunks, randomness, in-place writes and the errors.
#include <gtest/gtest.h>

#include <cmath>

#include "support/expect.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_error;

Tensor rnd(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return randn(s, DType::Float64, &g);
}

double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  if (a.shape() != b.shape()) return INFINITY;
  if (a.numel() == 0) return 0;
  return (a.detach().to(DType::Float64) - b.detach().to(DType::Float64)).abs().max().item<double>();
}

// The oracle: f on each example (args sliced along their in_dims), stacked along out_dim.
template <class F>
Tensor loop(F f, const std::vector<Tensor>& args, const std::vector<BatchDim>& in_dims,
            int64_t out_dim = 0) {
  int64_t n = -1;
  for (std::size_t i = 0; i < args.size(); ++i)
    if (in_dims[i]) n = args[i].size(*in_dims[i]);
  std::vector<Tensor> outs;
  for (int64_t b = 0; b < n; ++b) {
    std::vector<Tensor> xs;
    for (std::size_t i = 0; i < args.size(); ++i)
      xs.push_back(in_dims[i] ? args[i].select(*in_dims[i], b) : args[i]);
    outs.push_back(f(xs));
  }
  return stack(outs, out_dim);
}

using ListF = std::function<Tensor(const std::vector<Tensor>&)>;

void expect_vmap_matches_loop(const ListF& f, const std::vector<Tensor>& args,
                              const std::vector<BatchDim>& in_dims, int64_t out_dim = 0) {
  Tensor got = vmap(f, in_dims, {out_dim})(args);
  Tensor want = loop(f, args, in_dims, out_dim);
  EXPECT_LT(max_diff(got, want), 1e-12);
}

TEST(Vmap, PointwiseAndBroadcasting) {
  ListF f = [](const std::vector<Tensor>& x) {
    return exp(x[0]) * x[1] + sin(x[0]).sum({-1}, true) - relu(x[1]) / (x[0].square() + 1);
  };
  const Tensor a = rnd({5, 3, 4}, 1), b = rnd({5, 4}, 2);
  expect_vmap_matches_loop(f, {a, b}, {0, 0});
  expect_vmap_matches_loop(f, {a, rnd({4}, 3)}, {0, no_batch});               // y shared
  expect_vmap_matches_loop(f, {rnd({3, 4}, 4), b}, {no_batch, 0});            // x shared
  expect_vmap_matches_loop(f, {rnd({3, 5, 4}, 5), rnd({4, 5}, 6)}, {1, -1});  // other dims
  expect_vmap_matches_loop(f, {a, b}, {0, 0}, 2);                             // out_dim
  expect_vmap_matches_loop(f, {a, b}, {0, 0}, -1);
}

TEST(Vmap, ScalarsComparisonsAndWhere) {
  ListF f = [](const std::vector<Tensor>& x) {
    Tensor m = gt(x[0], 0.1);
    return where(m, x[0] * 2 + 1, x[1].pow(2.0)) + maximum(x[0], x[1]) +
           logical_and(m, lt(x[1], x[0])).to(DType::Float64);
  };
  expect_vmap_matches_loop(f, {rnd({6}, 7), rnd({6}, 8)}, {0, 0});  // logical 0-d
  expect_vmap_matches_loop(f, {rnd({6, 2}, 9), rnd({2}, 10)}, {0, no_batch});
}

TEST(Vmap, ReductionsViewsAndShapes) {
  ListF f = [](const std::vector<Tensor>& x) {
    const Tensor& t = x[0];  // logical [3, 4]
    Tensor r = t.sum({0}) + t.mean({1}).reshape({3, 1}).sum({0}) + amax(t, {0}) +
               t.transpose(0, 1).reshape({-1}).slice(0, 2, 6).sum() + t.select(1, 2).prod() +
               norm(t, 2, {0}) + logsumexp(t, {1}).sum() + var(t, {0}) +
               cat({t, t * 2}, 1).unsqueeze(0).squeeze(0).narrow(1, 3, 4).sum({0});
    return r + softmax(t, 0).sum({0}) + log_softmax(t, -1).exp().sum({1}).sum() +
           t.expand({2, 3, 4}).sum({0, 1}) + t.max() + argmax(t, 0).to(DType::Float64);
  };
  expect_vmap_matches_loop(f, {rnd({5, 3, 4}, 11)}, {0});
  expect_vmap_matches_loop(f, {rnd({3, 4, 5}, 12)}, {-1});
}

// Logical 0-d values: reductions and softmax over them must not reach the batch dim.
TEST(Vmap, LogicalScalars) {
  ListF f = [](const std::vector<Tensor>& x) {
    const Tensor& s = x[0];  // logical []
    return s.sum() + amax(s, {}) + s.prod() + norm(s) + softmax(s, 0) + log_softmax(s, -1) +
           s.mean() + s.max();
  };
  expect_vmap_matches_loop(f, {rnd({5}, 35)}, {0});
  auto g = [](const Tensor& s) {
    return grad([](const Tensor& t) { return softmax(t, 0) * t; })(s);
  };
  Tensor per = vmap(g)(rnd({4}, 36));
  EXPECT_LT(max_diff(per, ones({4}, DType::Float64)), 1e-12);  // softmax of one element is 1
}

TEST(Vmap, MatmulLinearLayerNormCrossEntropy) {
  const Tensor w = rnd({6, 4}, 13), bias = rnd({6}, 14), g = rnd({6}, 15);
  const Tensor target = tensor(std::vector<int64_t>{0, 5, 2, 3, 1, 4, 2, 0, 1, 5}, Shape{5, 2});
  ListF f = [&](const std::vector<Tensor>& x) -> Tensor {
    Tensor h = linear(x[0], w, bias);        // [2, 6]
    Tensor n = layer_norm(h, {6}, g, bias);  // weights shared
    Tensor m = matmul(n, w) + matmul(x[0], x[0].t()).sum({0}).reshape({2, 1});
    return cross_entropy(n, x[1], Reduction::Mean) + m.sum() +
           dot(x[0].select(0, 0), x[0].select(0, 1));
  };
  expect_vmap_matches_loop(f, {rnd({5, 2, 4}, 16), target}, {0, 0});
  // Batched weights (an ensemble) go through the rules' batched-weight branches.
  ListF ens = [&](const std::vector<Tensor>& x) {
    return layer_norm(linear(x[1], x[0]), {6}, x[2], x[3]);
  };
  expect_vmap_matches_loop(ens,
                           {rnd({5, 6, 4}, 17), rnd({3, 4}, 18), rnd({5, 6}, 19), rnd({5, 6}, 20)},
                           {0, no_batch, 0, 0});
}

// A shared matrix times a batch of matrices or vectors: the MatMul rule's one-GEMM branch
// (jacrev's cotangents meet the weights this way), with the batch in front and last, the
// result used by later views (reshape after a matrix-vector product), and under grad.
TEST(Vmap, SharedMatrixTimesBatch) {
  const Tensor w = rnd({5, 4}, 41);
  ListF vec = [&](const std::vector<Tensor>& x) { return tanh(matmul(w, x[0])).reshape({1, 5}); };
  ListF mat = [&](const std::vector<Tensor>& x) { return matmul(w, x[0]) * 2.0; };
  for (const int64_t n : {1, 3}) {
    expect_vmap_matches_loop(mat, {rnd({6, 4, n}, 42)}, {0});
    expect_vmap_matches_loop(mat, {rnd({4, n, 6}, 43)}, {-1}, 1);
  }
  expect_vmap_matches_loop(vec, {rnd({6, 4}, 44)}, {0});
  expect_vmap_matches_loop(vec, {rnd({4, 6}, 45)}, {1});
  // Per-example gradients through it: the VJP multiplies the shared wᵀ by the batch.
  auto loss = [&](const Tensor& x) { return tanh(matmul(w, x)).square().sum(); };
  const Tensor xs = rnd({6, 4, 3}, 46);
  const Tensor got = vmap(grad(loss))(xs);
  for (int64_t b = 0; b < 6; ++b)
    EXPECT_LT(max_diff(got.select(0, b), grad(loss)(xs.select(0, b))), 1e-12) << "example " << b;
}

TEST(Vmap, IndexingWithBatchedIndices) {
  const Tensor table = rnd({7, 3}, 21);
  const Tensor idx = tensor(std::vector<int64_t>{0, 6, 2, 2, 5, 1, 3, 3, 0}, Shape{3, 3});
  ListF f = [&](const std::vector<Tensor>& x) {
    Tensor rows = embedding(table, x[0]);  // index batched, table shared
    Tensor g = gather(x[1], 0, x[0].unsqueeze(1).expand({3, 2}));
    return rows.sum({1}) + g.sum({1}) + index_select(x[1], 0, x[0]).sum({1}) +
           index_add(zeros({7, 2}, DType::Float64), 0, x[0], x[1].slice(0, 0, 3)).sum();
  };
  expect_vmap_matches_loop(f, {idx, rnd({3, 7, 2}, 22)}, {0, 0});
}

// The per-example gradient (DP-SGD's first step) equals a loop of single-example gradients.
TEST(Vmap, PerExampleGradientsOfAnMlp) {
  const Tensor w1 = rnd({8, 4}, 23), b1 = rnd({8}, 24), w2 = rnd({3, 8}, 25);
  auto loss = [](const std::vector<Tensor>& p) {  // p: w1, b1, w2, x, y
    Tensor h = gelu(linear(p[3], p[0], p[1]));
    return cross_entropy(linear(h, p[2]).unsqueeze(0), p[4].unsqueeze(0));
  };
  const Tensor x = rnd({6, 4}, 26);
  const Tensor y = tensor(std::vector<int64_t>{0, 2, 1, 1, 0, 2});
  auto grads = vmap(grad(loss, {0, 1, 2}), {no_batch, no_batch, no_batch, 0, 0});
  std::vector<Tensor> per_example = grads(std::vector<Tensor>{w1, b1, w2, x, y});
  ASSERT_EQ(per_example.size(), 3u);
  for (int64_t i = 0; i < 6; ++i) {
    std::vector<Tensor> one =
        grad(loss, {0, 1, 2})(std::vector<Tensor>{w1, b1, w2, x.select(0, i), y.select(0, i)});
    for (std::size_t k = 0; k < 3; ++k)
      EXPECT_LT(max_diff(per_example[k].select(0, i), one[k]), 1e-12);
  }
}

TEST(Vmap, GradOfVmapAndJvpBothWays) {
  auto f = [](const Tensor& x) { return (sin(x) * x).sum({-1}); };
  const Tensor x = rnd({4, 3}, 27), t = rnd({4, 3}, 28);
  // grad(vmap(f)): the batched function's gradient; the loop's is cos(x) x + sin(x).
  Tensor g = grad([&](const Tensor& z) { return vmap(f)(z).sum(); })(x);
  EXPECT_LT(max_diff(g, cos(x) * x + sin(x)), 1e-12);
  // jvp(vmap(f)) and vmap(jvp(f)) against the analytic directional derivative.
  Tensor want = ((cos(x) * x + sin(x)) * t).sum({-1});
  EXPECT_LT(max_diff(jvp(vmap(f), x, t).tangents, want), 1e-12);
  auto per_row = [&](const Tensor& xr, const Tensor& tr) { return jvp(f, xr, tr).tangents; };
  EXPECT_LT(max_diff(vmap(per_row)(x, t), want), 1e-12);
  // Per-example Hessian-vector products: vmap(hvp).
  auto row_hvp = [&](const Tensor& xr, const Tensor& tr) { return hvp(f, xr, tr); };
  Tensor h = vmap(row_hvp)(x, t);
  EXPECT_LT(max_diff(h, (2 * cos(x) - x * sin(x)) * t), 1e-12);
}

TEST(Vmap, NestedVmapAndCapturedTensors) {
  const Tensor a = rnd({3, 4, 5}, 29), c = rnd({4, 5}, 30);
  auto inner = [&](const Tensor& row, const Tensor& outer) {
    return (row * outer).sum() + row.exp().sum();  // `outer` batched by the outer vmap only
  };
  auto f = [&](const Tensor& m, const Tensor& o) {
    return vmap([&](const Tensor& r) { return inner(r, o); })(m);
  };
  Tensor got = vmap(f)(a, c.expand({3, 4, 5}).contiguous());
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      Tensor want = inner(a.select(0, i).select(0, j), c);
      EXPECT_NEAR(got.select(0, i).select(0, j).item<double>(), want.item<double>(), 1e-12);
    }
  // vmap(vmap(f)) over two dims of one tensor equals f on every element.
  Tensor sq = vmap(vmap([](const Tensor& e) { return e * e + 1; }))(a);
  EXPECT_LT(max_diff(sq, a * a + 1), 1e-12);
}

TEST(Vmap, ChunksEqualOnePass) {
  auto f = [](const Tensor& x) { return softmax(x, 0) * x.sum(); };
  const Tensor x = rnd({10, 6}, 31);
  Tensor whole = vmap(f)(x);
  for (int64_t chunk : {1, 3, 4, 10, 64}) {
    VmapOptions o;
    o.chunk_size = chunk;
    EXPECT_LT(max_diff(vmap(f, {0}, {0}, o)(x), whole), 1e-15) << "chunk " << chunk;
  }
}

TEST(Vmap, Randomness) {
  const Tensor x = zeros({4, 1000}, DType::Float64);
  auto noisy = [](const Tensor& r) { return r + randn(r.shape(), DType::Float64); };
  expect_error([&] { vmap(noisy)(x); }, ErrorKind::Value, {"randn", "vmap", "Randomness"});
  VmapOptions same;
  same.randomness = Randomness::Same;
  Tensor s = vmap(noisy, {0}, {0}, same)(x);
  for (int64_t i = 1; i < 4; ++i) EXPECT_EQ(max_diff(s.select(0, i), s.select(0, 0)), 0.0);
  VmapOptions diff;
  diff.randomness = Randomness::Different;
  Tensor d = vmap(noisy, {0}, {0}, diff)(x);
  for (int64_t i = 1; i < 4; ++i) EXPECT_GT(max_diff(d.select(0, i), d.select(0, 0)), 0.5);
  // Each example is N(0, 1): its mean is within a few standard errors of zero.
  for (int64_t i = 0; i < 4; ++i) EXPECT_LT(std::abs(d.select(0, i).mean().item<double>()), 0.2);
  // dropout draws its mask the same way.
  Tensor dm = vmap([](const Tensor& r) { return dropout(r + 1, 0.5, true); }, {0}, {0}, diff)(x);
  EXPECT_GT(max_diff(dm.select(0, 1), dm.select(0, 0)), 0.5);
}

TEST(Vmap, InPlaceWrites) {
  // Into a batched tensor (a clone of the argument): works, example by example.
  Tensor x = rnd({4, 3}, 32);
  const Tensor before = x.clone();
  Tensor r = vmap([](const Tensor& row) {
    Tensor y = row.clone();
    y.mul_(2).add_(row);
    return y;
  })(x);
  EXPECT_LT(max_diff(r, before * 3), 1e-15);
  Tensor buf = zeros({3}, DType::Float64);
  expect_error(
      [&] {
        vmap([&](const Tensor& row) {
          buf.add_(row);  // every example would write the same memory
          return buf;
        })(x);
      },
      ErrorKind::Value, {"add_", "vmap", "not batched"});
}

// Writing into a view of a batched tensor with a transform inside the vmap recording it: the
// base's new history (copy_slices) and the view's regenerated one (as_strided) batch like any
// op (Note [Views and in-place ops under vmap]). The loop of per-example gradients is the
// oracle.
TEST(Vmap, InPlaceWritesIntoViewsUnderGrad) {
  const Tensor x = rnd({4, 3}, 35), w = rnd({4, 2}, 36);
  auto f = [](const Tensor& row, const Tensor& wr) {
    Tensor b = row * 1.0;
    Tensor v = b.narrow(0, 1, 2);
    v.mul_(wr);            // b's rows 1..2 through the view
    b.add_(row.square());  // and b itself, so v's history is regenerated below
    return (v * b.narrow(0, 0, 2)).sum() + b.exp().sum();
  };
  const Tensor got =
      vmap(grad([&](const Tensor& row, const Tensor& wr) { return f(row, wr); }))(x, w);
  std::vector<Tensor> want;
  for (int64_t k = 0; k < 4; ++k)
    want.push_back(grad([&](const Tensor& row) { return f(row, w.select(0, k)); })(x.select(0, k)));
  EXPECT_LT(max_diff(got, stack(want, 0)), 1e-12);
  // Nested vmaps with the transform inside: refused by name, not computed wrongly.
  expect_error(
      [&] {
        vmap(vmap(grad([&](const Tensor& e) {
          Tensor b = e * 1.0;
          b.narrow(0, 0, 1).mul_(2.0);
          return b.sum();
        })))(rnd({2, 3, 4}, 37));
      },
      ErrorKind::NotImplemented, {"nested vmaps"});
}

// torch.func's rule for .grad: backward() inside vmap cannot put a per-example gradient into
// the .grad of a tensor that is not batched; autograd::grad inside vmap is the way.
TEST(Vmap, BackwardIntoAnUnbatchedLeafIsRefused) {
  const Tensor x = rnd({4, 3}, 38);
  const Tensor w = rnd({3}, 39).requires_grad_(true);
  expect_error(
      [&] {
        vmap([&](const Tensor& row) {
          Tensor l = (row * w).sum();
          l.backward();
          return l;
        })(x);
      },
      ErrorKind::Autograd, {"[backward]", "inside vmap", "grad()"});
  EXPECT_FALSE(w.grad().defined());
  const Tensor per_example =
      vmap([&](const Tensor& row) { return autograd::grad({(row * w).sum()}, {w})[0]; })(x);
  EXPECT_LT(max_diff(per_example, x), 1e-15);  // d/dw sum(row * w) = row
}

TEST(Vmap, Errors) {
  const Tensor x = rnd({4, 3}, 33), y = rnd({5, 3}, 34);
  auto add2 = [](const Tensor& a, const Tensor& b) { return a + b; };
  expect_error([&] { vmap(add2)(x, y); }, ErrorKind::Shape, {"vmap", "different sizes"});
  expect_error([&] { vmap(add2, {0, 0, 0})(x, x); }, ErrorKind::Value, {"vmap", "in_dims"});
  expect_error([&] { vmap(add2, {0, 2})(x, x); }, ErrorKind::Index, {"vmap", "in_dim 2"});
  expect_error([&] { vmap(add2, {no_batch})(x, x); }, ErrorKind::Value, {"vmap", "no argument"});
  expect_error([&] { vmap([](const Tensor& a) { return a; }, {0}, {3})(x); }, ErrorKind::Index,
               {"vmap", "out_dim 3"});
  expect_error([&] { vmap([](const Tensor& a) { return a.sum().item<double>() * a; })(x); },
               ErrorKind::NotImplemented, {"vmap"});
  Tensor leaked;
  vmap([&](const Tensor& a) {
    leaked = a;
    return a;
  })(x);
  expect_error([&] { (void)(leaked + 1); }, ErrorKind::Value, {"add", "escaped"});
  VmapOptions zero;
  zero.chunk_size = 0;
  expect_error([&] { vmap([](const Tensor& a) { return a; }, {0}, {0}, zero)(x); },
               ErrorKind::Value, {"vmap", "chunk_size"});
}

}  // namespace
