// Wrong values that independent checks found where transforms meet compile, second
// derivatives, vmap rules and nested transforms. Each case has an independent oracle: the eager
// transform, finite differences, an analytic result or a loop over examples.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "adjoint/adjoint.h"
#include "support/expect.h"

namespace {

using namespace adjoint;

constexpr double kInfinity = std::numeric_limits<double>::infinity();

void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], tol * std::max(1.0, std::abs(b[i]))) << what << " at " << i;
}

Tensor example_x() {
  return tensor({0.5, -1.0, 2.0, 1.5, 0.25, -0.75}, Shape{2, 3}, DType::Float64);
}

// jacrev vmaps the one-hot cotangents through the compiled backward node: its traced ops must
// run with their batching rules (a traced transpose gave e0 for every row).
TEST(CompiledTransforms, JacrevOfACompiledTransposeIsThePermutation) {
  const Tensor x = example_x();
  auto f = [](const Tensor& a) { return transpose(a, 0, 1); };
  const Tensor want = jacrev(f)(x);
  // The permutation itself: d y[j, i] / d x[i, j] = 1.
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      EXPECT_EQ(want.select(0, j).select(0, i).select(0, i).select(0, j).item<double>(), 1.0);
  expect_close(jacrev(compile(f))(x), want, 0, "jacrev(compile(transpose))");
}

TEST(CompiledTransforms, JacrevOfCompiledPointwiseProductsAndSolves) {
  const Tensor x = example_x();
  const Tensor m =
      tensor({2.0, 0.5, -0.25, 0.5, 3.0, 0.75, -0.25, 0.75, 4.0}, Shape{3, 3}, DType::Float64);
  auto f = [&](const Tensor& a) {
    Tensor y = tanh(a * 1.5 + 0.25) * a;  // fused into one loop
    return linalg::solve(m, matmul(y, m).t());
  };
  expect_close(jacrev(compile(f))(x), jacrev(f)(x), 1e-12, "jacrev(compile(f))");
  // The same through an explicit vmap of the compiled function's pullback.
  auto [y, pullback] = vjp(compile(f), x);
  const Tensor rows = eye(y.numel(), std::nullopt, DType::Float64).reshape({y.numel(), 3, 2});
  const Tensor got = vmap([&](const Tensor& c) { return pullback(c); })(rows);
  expect_close(got.reshape({3, 2, 2, 3}), jacrev(f)(x), 1e-12, "vmap of the pullback");
}

// Eager cross_entropy reduced per example in C++ under vmap, which a trace cannot record; the
// batching rule now reduces each example's rows.
TEST(CompiledTransforms, VmapOfACompiledCrossEntropyMeansEachExample) {
  const Tensor targets = tensor<int64_t>({0, 2}, Shape{2});
  auto f = [&](const Tensor& z) { return cross_entropy(z, targets); };
  const Tensor x = example_x();
  const Tensor zb = stack({x, x * 2.0});
  const Tensor loop = stack({f(x), f(x * 2.0)});
  expect_close(vmap(f)(zb), loop, 1e-14, "vmap(cross_entropy)");
  expect_close(vmap(compile(f))(zb), loop, 1e-14, "vmap(compile(cross_entropy))");
  // Sum and ignored rows too: each example counts its own rows.
  const Tensor some_ignored = tensor<int64_t>({-100, 1}, Shape{2});
  for (Reduction r : {Reduction::Sum, Reduction::Mean}) {
    auto g = [&](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{cross_entropy(in[0], in[1], r)};
    };
    const std::vector<Tensor> batch{zb, stack({targets, some_ignored})};
    const Tensor want = stack({g({x, targets})[0], g({x * 2.0, some_ignored})[0]});
    expect_close(vmap(g)(batch)[0], want, 1e-14, "vmap(cross_entropy), batched targets");
    expect_close(vmap(compile(g))(batch)[0], want, 1e-14, "vmap(compile(cross_entropy))");
  }
}

// An example whose rows are all ignored: a NaN mean, as unbatched, and a zero gradient, also
// when the gradient is taken through the batching rule's ops (outside the vmap).
TEST(CompiledTransforms, AnExampleWithEveryRowIgnoredHasANaNLossAndNoGradient) {
  const Tensor targets = tensor<int64_t>({0, 2, -100, -100}, Shape{2, 2});
  const Tensor x = example_x();
  const Tensor zb = stack({x, x * 2.0});
  auto f = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{cross_entropy(in[0], in[1])};
  };
  const Tensor losses = vmap(f)(std::vector<Tensor>{zb, targets})[0];
  EXPECT_FALSE(std::isnan(losses.select(0, 0).item<double>()));
  EXPECT_TRUE(std::isnan(losses.select(0, 1).item<double>()));
  auto first = [&](const Tensor& z) {
    return vmap(f)(std::vector<Tensor>{z, targets})[0].select(0, 0);
  };
  auto second = [&](const Tensor& z) {
    return vmap(f)(std::vector<Tensor>{z, targets})[0].select(0, 1);
  };
  const Tensor g0 = grad(first)(zb), g1 = grad(second)(zb);
  const Tensor want0 = grad([&](const Tensor& z) { return f({z, targets.select(0, 0)})[0]; })(x);
  expect_close(g0.select(0, 0), want0, 1e-14, "gradient of example 0");
  expect_close(g1, zeros_like(zb), 0, "gradient of the ignored example");
}

// prod's second derivatives with two or more zeros in a slice: d²/dx_i dx_j prod(x) is the
// product of the other elements, so [[0, 1], [1, 0]] at [0, 0].
TEST(ProdDerivatives, HessianWithTwoZerosIsTheProductOfTheOthers) {
  auto p = [](const Tensor& x) { return prod(x); };
  expect_close(hessian(p)(tensor({0.0, 0.0}, DType::Float64)),
               tensor({0.0, 1.0, 1.0, 0.0}, Shape{2, 2}, DType::Float64), 0, "hessian at [0, 0]");
  // Three elements, two of them zero: H[i][j] = prod of the element that is neither i nor j.
  const Tensor x = tensor({0.0, 3.0, 0.0}, DType::Float64);
  const Tensor want =
      tensor({0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0}, Shape{3, 3}, DType::Float64);
  expect_close(hessian(p)(x), want, 0, "hessian at [0, 3, 0]");
  expect_close(hessian(compile(p))(x), want, 0, "hessian(compile(prod))");
  // Third derivatives at three zeros: d³/dx0 dx1 dx2 = 1.
  auto d01 = [&](const Tensor& z) { return hessian(p)(z).select(0, 0).select(0, 1); };
  const Tensor third = grad(d01)(tensor({0.0, 0.0, 0.0}, DType::Float64));
  expect_close(third, tensor({0.0, 0.0, 1.0}, DType::Float64), 0, "third derivative");
}

TEST(ProdDerivatives, GradientsAlongDimsAgreeWithFiniteDifferences) {
  Generator gen(3);
  Tensor x = randn({3, 4, 2}, DType::Float64, &gen);
  x = where(gt(abs(x), 1.2), zeros_like(x), x);  // some zeros, some slices with two
  for (const std::vector<int64_t>& dims :
       {std::vector<int64_t>{1}, std::vector<int64_t>{0, 2}, std::vector<int64_t>{}}) {
    for (bool keepdim : {false, true}) {
      auto f = [&](const Tensor& z) { return (prod(z, dims, keepdim) * 1.3).sum(); };
      const Tensor g = grad(f)(x);
      // Central differences of a polynomial of degree one in each element: exact up to
      // rounding.
      std::vector<double> fd;
      const std::vector<double> xv = x.to_vector<double>();
      for (std::size_t i = 0; i < xv.size(); ++i) {
        std::vector<double> up = xv, down = xv;
        up[i] += 0.5;
        down[i] -= 0.5;
        fd.push_back(f(tensor(up, x.shape(), DType::Float64)).item<double>() -
                     f(tensor(down, x.shape(), DType::Float64)).item<double>());
      }
      expect_close(g, tensor(fd, x.shape(), DType::Float64), 1e-12, "prod gradient");
    }
  }
}

// layer_norm under vmap with x unbatched and the weight and bias batched: each example is the
// same normalisation with its own affine transform.
TEST(LayerNormVmap, UnbatchedInputWithBatchedWeightAndBias) {
  const Tensor x =
      tensor({0.5, -1.0, 2.0, 1.5, 0.25, -0.75, 3.0, 1.0}, Shape{2, 4}, DType::Float64);
  Generator gen(5);
  const Tensor w = randn({3, 4}, DType::Float64, &gen), b = randn({3, 4}, DType::Float64, &gen);
  auto f = [](const Tensor& xx, const Tensor& ww, const Tensor& bb) {
    return layer_norm(xx, {4}, ww, bb).sum();
  };
  const Tensor got = vmap(f, {no_batch, 0, 0})(x, w, b);
  std::vector<Tensor> loop;
  for (int64_t k = 0; k < 3; ++k) loop.push_back(f(x, w.select(0, k), b.select(0, k)));
  expect_close(got, stack(loop), 1e-13, "vmap(layer_norm)");
  // And its per-example gradient with respect to the weight.
  auto gw = [&](const Tensor& ww, const Tensor& bb) {
    return grad([&](const Tensor& v) { return f(x, v, bb); })(ww);
  };
  std::vector<Tensor> gloop;
  for (int64_t k = 0; k < 3; ++k) gloop.push_back(gw(w.select(0, k), b.select(0, k)));
  expect_close(vmap(gw)(w, b), stack(gloop), 1e-13, "vmap(grad(layer_norm))");
}

// A gradient of a function that takes a gradient inside is a plain tensor at the top level,
// with no history to drag along: also when the inner gradient is at a constant primal and its
// function closes over the outer input (the inner transform's own leaf is not from outside).
TEST(NestedGrad, TheOuterGradientIsAPlainTensor) {
  const Tensor w = tensor({0.3, -0.7, 1.1}, DType::Float64);
  const Tensor c = tensor({2.0, 1.0, 0.5}, DType::Float64);
  // f(x) = sum(x * d/dy sum(x y^2) at c) = sum(2 x^2 c), so df/dx = 4 x c.
  auto f = [&](const Tensor& x) {
    return (x * grad([&](const Tensor& y) { return (x * y * y).sum(); })(c)).sum();
  };
  const Tensor g = grad(f)(w);
  EXPECT_FALSE(g.requires_grad());
  EXPECT_EQ(g.grad_fn(), nullptr);
  expect_close(g, 4 * w * c, 1e-14, "grad of a nested grad at a constant");
  // A descent loop stays plain at every step.
  Tensor v = w;
  for (int step = 0; step < 3; ++step) {
    v = v - grad(f)(v) * 0.1;
    EXPECT_FALSE(v.requires_grad()) << "step " << step;
    EXPECT_EQ(v.grad_fn(), nullptr) << "step " << step;
  }
  // The inner gradient at the outer input itself: d/dw sum(g(w)^2) with g = sin w + w cos w,
  // g' = 2 cos w - w sin w.
  auto inner = [](const Tensor& u) { return (sin(u) * u).sum(); };
  auto h = [&](const Tensor& u) { return grad(inner)(u).square().sum(); };
  const Tensor gh = grad(h)(w);
  EXPECT_FALSE(gh.requires_grad());
  expect_close(gh, 2 * (sin(w) + w * cos(w)) * (2 * cos(w) - w * sin(w)), 1e-14,
               "grad of a nested grad at the input");
}

// An inner transform over a leaf that an enclosing transform made still records for it: the
// second derivative through it is right (the leaf is not the inner transform's own).
TEST(NestedGrad, ThreeLevelsAtConstantsStillDifferentiateTheOuterInput) {
  const Tensor c = tensor({0.5, 2.0}, DType::Float64);
  const Tensor w = tensor({1.5, -0.5}, DType::Float64);
  // m(x) = sum over the middle grad at c of x^2 y^2 z: d/dz = x^2 y^2 summed, d/dy of that...
  // f(x) = sum(d/dy [sum(d/dz sum(x^3 y^2 z) at z = c)] at y = c) = sum(2 x^3 c) -> 6 x^2 c.
  auto f = [&](const Tensor& x) {
    auto middle = [&](const Tensor& y) {
      auto inner = [&](const Tensor& z) { return (x * x * x * y * y * z).sum(); };
      return grad(inner)(c).sum();
    };
    return grad(middle)(c).sum();
  };
  const Tensor g = grad(f)(w);
  EXPECT_FALSE(g.requires_grad());
  expect_close(g, 6 * w * w * c, 1e-14, "three levels");
}

TEST(EmptyBatch, VmapOverZeroExamplesGivesEmptyResults) {
  auto f = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0].sum(), x[0] * 2.0}; };
  const std::vector<Tensor> out = vmap(f)(std::vector<Tensor>{zeros({0, 4})});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].shape(), (Shape{0}));
  EXPECT_EQ(out[1].shape(), (Shape{0, 4}));
  VmapOptions o;
  o.chunk_size = 0;
  adjoint::testing::expect_error(
      [&] {
        vmap(f, {0}, {0}, o)(std::vector<Tensor>{zeros({2, 4})});
      },
      ErrorKind::Value, {"vmap", "chunk_size"});
}

// A refused allocation is not memory in use: the storage peak stays where it was.
TEST(StoragePeak, ARefusedAllocationDoesNotCount) {
  reset_peak_memory_usage();
  const std::size_t before = memory_usage().storage_peak_bytes;
  EXPECT_ANY_THROW(zeros({1LL << 40}));
  EXPECT_EQ(memory_usage().storage_peak_bytes, before);
  EXPECT_LT(memory_stats().peak_bytes, std::size_t{1} << 40);
}

// compile allows undefined arguments (optional inputs); a function that reads one says which.
TEST(CompileErrors, AnUndefinedArgumentThatTheFunctionReadsIsNamed) {
  auto f = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + in[1]}; };
  adjoint::testing::expect_error(
      [&] {
        compile(f)({ones({2}), Tensor()});
      },
      ErrorKind::Value, {"[compile]", "argument 1 is an undefined tensor"});
  auto g = [](const Tensor& x) { return x * 2.0; };
  adjoint::testing::expect_error([&] { compile(g)(Tensor()); }, ErrorKind::Value,
                                 {"[compile]", "argument 0 is an undefined tensor"});
}

// The 2-norm of float64 values whose squares overflow or underflow (the solvers' residuals).
TEST(Norm, Float64ValuesBeyondTheSquaresRange) {
  const Tensor big = tensor({3e200, -4e200}, DType::Float64);
  expect_close(norm(big), scalar_tensor(5e200, DType::Float64), 1e-15, "norm at 1e200");
  const Tensor tiny = tensor({3e-200, 4e-200, 0.0}, DType::Float64);
  expect_close(norm(tiny), scalar_tensor(5e-200, DType::Float64), 1e-15, "norm at 1e-200");
  // Its gradient x / ||x||, and per row.
  expect_close(grad([](const Tensor& x) { return norm(x); })(big),
               tensor({0.6, -0.8}, DType::Float64), 1e-15, "gradient at 1e200");
  const Tensor rows = tensor({3e200, 4e200, 0.0, 0.0, 1.0, kInfinity}, Shape{3, 2}, DType::Float64);
  const std::vector<double> n = norm(rows, 2, {1}).to_vector<double>();
  EXPECT_NEAR(n[0], 5e200, 1e185);
  EXPECT_EQ(n[1], 0.0);
  EXPECT_EQ(n[2], kInfinity);
  EXPECT_TRUE(std::isnan(norm(tensor({1.0, std::nan("")}, DType::Float64)).item<double>()));
}

}  // namespace
