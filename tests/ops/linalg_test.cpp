// Unit tests for matmul, linear, dot and outer: values and gradients against naive loops over
// the inputs' elements (the oracle), shapes under broadcasting, and the errors for bad shapes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "adjoint/adjoint.h"

using namespace adjoint;

namespace {

Tensor rnd(const Shape& s, bool grad = true) {
  static Generator gen(42);
  Tensor t = randn(s, DType::Float64, &gen);
  return grad ? t.requires_grad_(true) : t;
}

// Row-major element (i, j) of a 2-d tensor's values.
double at(const std::vector<double>& v, int64_t cols, int64_t i, int64_t j) {
  return v[i * cols + j];
}

// Naive C = A B for row-major [m, k] and [k, n] values.
std::vector<double> naive_mm(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                             int64_t k, int64_t n) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * n + j] += at(a, k, i, p) * at(b, n, p, j);
  return c;
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                 double tol = 1e-10) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

template <class F>
void expect_error(F&& f, ErrorKind kind, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "expected an adjoint::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const std::string& s : fragments)
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos)
          << "message '" << e.what() << "' lacks '" << s << "'";
  }
}

}  // namespace

TEST(Matmul, TwoByTwoMatchesNaiveLoop) {
  Tensor a = rnd({2, 3}), b = rnd({3, 4});
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.shape(), Shape({2, 4}));
  expect_near(c.to_vector<double>(),
              naive_mm(a.to_vector<double>(), b.to_vector<double>(), 2, 3, 4));
}

TEST(Matmul, GradientsAreGradOutTimesTransposes) {
  Tensor a = rnd({2, 3}), b = rnd({3, 4}), w = rnd({2, 4}, false);
  (matmul(a, b) * w).sum().backward();
  // L = sum(W ∘ AB): dL/dA_ip = sum_j W_ij B_pj, dL/dB_pj = sum_i A_ip W_ij
  auto av = a.to_vector<double>(), bv = b.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> da(6, 0.0), db(12, 0.0);
  for (int i = 0; i < 2; ++i)
    for (int p = 0; p < 3; ++p)
      for (int j = 0; j < 4; ++j) {
        da[i * 3 + p] += wv[i * 4 + j] * bv[p * 4 + j];
        db[p * 4 + j] += av[i * 3 + p] * wv[i * 4 + j];
      }
  expect_near(a.grad().to_vector<double>(), da);
  expect_near(b.grad().to_vector<double>(), db);
}

TEST(Matmul, TransposedViewsNeedNoCopyAndAreCorrect) {
  Tensor at_ = rnd({3, 2}), bt = rnd({4, 3});
  Tensor c = matmul(at_.t(), bt.t());  // [2, 3] @ [3, 4]
  Tensor a = at_.t().contiguous(), b = bt.t().contiguous();
  expect_near(c.to_vector<double>(),
              naive_mm(a.to_vector<double>(), b.to_vector<double>(), 2, 3, 4));
  c.sum().backward();
  EXPECT_EQ(at_.grad().shape(), Shape({3, 2}));
  EXPECT_EQ(bt.grad().shape(), Shape({4, 3}));
  // d sum(AB)/dA_ip = sum_j B_pj, stored transposed in at_.grad
  auto bv = b.to_vector<double>();
  auto g = at_.grad().to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int p = 0; p < 3; ++p) {
      double want = 0;
      for (int j = 0; j < 4; ++j) want += bv[p * 4 + j];
      EXPECT_NEAR(g[p * 2 + i], want, 1e-10);
    }
}

TEST(Matmul, VectorOperandsArePromotedAndSqueezed) {
  Tensor v = rnd({3}), m = rnd({3, 4}), n = rnd({4, 3});
  Tensor vm = matmul(v, m);
  EXPECT_EQ(vm.shape(), Shape({4}));
  expect_near(vm.to_vector<double>(),
              naive_mm(v.to_vector<double>(), m.to_vector<double>(), 1, 3, 4));
  Tensor nv = matmul(n, v);
  EXPECT_EQ(nv.shape(), Shape({4}));
  expect_near(nv.to_vector<double>(),
              naive_mm(n.to_vector<double>(), v.to_vector<double>(), 4, 3, 1));
  Tensor w = rnd({3});
  Tensor vw = matmul(v, w);
  EXPECT_EQ(vw.dim(), 0);
  auto vv = v.to_vector<double>(), wv = w.to_vector<double>();
  EXPECT_NEAR(vw.item<double>(), vv[0] * wv[0] + vv[1] * wv[1] + vv[2] * wv[2], 1e-12);
  // 1-d @ batched: [3] @ [2, 3, 4] -> [2, 4]
  Tensor bm = rnd({2, 3, 4});
  Tensor r = matmul(v, bm);
  EXPECT_EQ(r.shape(), Shape({2, 4}));
  auto bmv = bm.to_vector<double>();
  for (int b = 0; b < 2; ++b) {
    std::vector<double> slice(bmv.begin() + b * 12, bmv.begin() + (b + 1) * 12);
    auto want = naive_mm(vv, slice, 1, 3, 4);
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(r.to_vector<double>()[b * 4 + j], want[j], 1e-10);
  }
  // batched @ 1-d: [2, 4, 3] @ [3] -> [2, 4]
  Tensor bn = rnd({2, 4, 3});
  EXPECT_EQ(matmul(bn, v).shape(), Shape({2, 4}));
}

TEST(Matmul, BatchedBroadcastMatchesNaiveLoop) {
  // [2, 1, 3, 4] @ [5, 4, 2] -> [2, 5, 3, 2]
  Tensor a = rnd({2, 1, 3, 4}), b = rnd({5, 4, 2});
  Tensor c = matmul(a, b);
  ASSERT_EQ(c.shape(), Shape({2, 5, 3, 2}));
  auto av = a.to_vector<double>(), bv = b.to_vector<double>(), cv = c.to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 5; ++j)
      for (int r = 0; r < 3; ++r)
        for (int s = 0; s < 2; ++s) {
          double want = 0;
          for (int p = 0; p < 4; ++p) want += av[i * 12 + r * 4 + p] * bv[j * 8 + p * 2 + s];
          EXPECT_NEAR(cv[((i * 5 + j) * 3 + r) * 2 + s], want, 1e-10);
        }
  // Gradients sum over the broadcast batch dims: dA[i] = sum_j 1 Bjᵀ, dB[j] = sum_i Aiᵀ 1
  c.sum().backward();
  ASSERT_EQ(a.grad().shape(), a.shape());
  ASSERT_EQ(b.grad().shape(), b.shape());
  auto ga = a.grad().to_vector<double>(), gb = b.grad().to_vector<double>();
  for (int i = 0; i < 2; ++i)
    for (int r = 0; r < 3; ++r)
      for (int p = 0; p < 4; ++p) {
        double want = 0;
        for (int j = 0; j < 5; ++j)
          for (int s = 0; s < 2; ++s) want += bv[j * 8 + p * 2 + s];
        EXPECT_NEAR(ga[i * 12 + r * 4 + p], want, 1e-10);
      }
  for (int j = 0; j < 5; ++j)
    for (int p = 0; p < 4; ++p)
      for (int s = 0; s < 2; ++s) {
        double want = 0;
        for (int i = 0; i < 2; ++i)
          for (int r = 0; r < 3; ++r) want += av[i * 12 + r * 4 + p];
        EXPECT_NEAR(gb[j * 8 + p * 2 + s], want, 1e-10);
      }
}

TEST(Matmul, BatchTimesMatrixFoldedOrNotAgree) {
  Tensor a = rnd({3, 2, 4}), b = rnd({4, 5});
  Tensor folded = matmul(a, b);  // contiguous: one gemm
  Tensor strided = matmul(a.transpose(1, 2).contiguous().transpose(1, 2), b);  // batched path
  ASSERT_EQ(folded.shape(), Shape({3, 2, 5}));
  auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  for (int i = 0; i < 3; ++i) {
    std::vector<double> slice(av.begin() + i * 8, av.begin() + (i + 1) * 8);
    auto want = naive_mm(slice, bv, 2, 4, 5);
    for (int j = 0; j < 10; ++j) {
      EXPECT_NEAR(folded.to_vector<double>()[i * 10 + j], want[j], 1e-10);
      EXPECT_NEAR(strided.to_vector<double>()[i * 10 + j], want[j], 1e-10);
    }
  }
}

TEST(Matmul, EmptyInnerDimGivesZeros) {
  Tensor c = matmul(zeros({2, 0}), zeros({0, 3}));
  EXPECT_EQ(c.shape(), Shape({2, 3}));
  for (float v : c.to_vector<float>()) EXPECT_EQ(v, 0.0f);
}

TEST(Matmul, PromotesDtypesAndMultipliesIntegers) {
  Tensor a = tensor(std::vector<int64_t>{1, 2, 3, 4}, Shape{2, 2});
  Tensor b = tensor(std::vector<int64_t>{5, 6, 7, 8}, Shape{2, 2});
  Tensor c = matmul(a, b);
  EXPECT_EQ(c.dtype(), DType::Int64);
  EXPECT_EQ(c.to_vector<int64_t>(), (std::vector<int64_t>{19, 22, 43, 50}));
  Tensor f = matmul(a, b.to(DType::Float64));
  EXPECT_EQ(f.dtype(), DType::Float64);
  EXPECT_EQ(matmul(ones({2, 2}, DType::Float32), ones({2, 2}, DType::Float64)).dtype(),
            DType::Float64);
}

TEST(Matmul, ErrorsNameTheOpAndBothOperands) {
  expect_error(
      [] {
        matmul(zeros({2, 3}), zeros({4, 5}));
      },
      ErrorKind::Shape,
      {"[matmul]", "inner dimensions differ", "[2, 3] (float32)", "[4, 5] (float32)"});
  expect_error([] { matmul(scalar_tensor(1.0), zeros({2})); }, ErrorKind::Shape,
               {"[matmul]", "[2]"});
  expect_error([] { matmul(zeros({3}), zeros({4})); }, ErrorKind::Shape,
               {"[matmul]", "[3]", "[4]"});
  expect_error(
      [] {
        matmul(zeros({2, 2, 3}), zeros({3, 3, 4}));
      },
      ErrorKind::Shape, {"[matmul]", "batch", "[2, 2, 3]", "[3, 3, 4]"});
  expect_error(
      [] {
        matmul(zeros({2}, DType::Bool), zeros({2, 2}, DType::Bool));
      },
      ErrorKind::DType, {"[matmul]", "bool"});
}

TEST(Matmul, MethodMatchesFreeFunction) {
  Tensor a = rnd({2, 3}), b = rnd({3, 2});
  expect_near(a.matmul(b).to_vector<double>(), matmul(a, b).to_vector<double>(), 0);
}

TEST(Linear, MatchesNaiveLoopWithBiasOverLeadingDims) {
  Tensor x = rnd({2, 3, 4}), w = rnd({5, 4}), b = rnd({5});
  Tensor y = linear(x, w, b);
  ASSERT_EQ(y.shape(), Shape({2, 3, 5}));
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  auto yv = y.to_vector<double>();
  for (int r = 0; r < 6; ++r)
    for (int o = 0; o < 5; ++o) {
      double want = bv[o];
      for (int i = 0; i < 4; ++i) want += xv[r * 4 + i] * wv[o * 4 + i];
      EXPECT_NEAR(yv[r * 5 + o], want, 1e-10);
    }
  // L = sum(G ∘ y): dx = G W, dW = Gᵀ x summed over rows, db = sum of G over rows
  Tensor g = rnd({2, 3, 5}, false);
  (y * g).sum().backward();
  auto gv = g.to_vector<double>();
  std::vector<double> dx(24, 0.0), dw(20, 0.0), db(5, 0.0);
  for (int r = 0; r < 6; ++r)
    for (int o = 0; o < 5; ++o) {
      db[o] += gv[r * 5 + o];
      for (int i = 0; i < 4; ++i) {
        dx[r * 4 + i] += gv[r * 5 + o] * wv[o * 4 + i];
        dw[o * 4 + i] += gv[r * 5 + o] * xv[r * 4 + i];
      }
    }
  expect_near(x.grad().to_vector<double>(), dx);
  expect_near(w.grad().to_vector<double>(), dw);
  expect_near(b.grad().to_vector<double>(), db);
}

TEST(Linear, WithoutBiasAndOnVectorsAndTransposedInputs) {
  Tensor x = rnd({4}), w = rnd({3, 4});
  Tensor y = linear(x, w);
  ASSERT_EQ(y.shape(), Shape({3}));
  expect_near(y.to_vector<double>(),
              naive_mm(w.to_vector<double>(), x.to_vector<double>(), 3, 4, 1));
  y.sum().backward();
  EXPECT_EQ(w.grad().shape(), Shape({3, 4}));
  auto xv = x.to_vector<double>();
  auto gw = w.grad().to_vector<double>();
  for (int o = 0; o < 3; ++o)
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(gw[o * 4 + i], xv[i], 1e-12);  // dW_oi = x_i

  Tensor xt = rnd({4, 2}), wt = rnd({4, 3});  // x = xtᵀ [2, 4], W = wtᵀ [3, 4]
  Tensor z = linear(xt.t(), wt.t());
  expect_near(z.to_vector<double>(),
              naive_mm(xt.t().contiguous().to_vector<double>(), wt.to_vector<double>(), 2, 4, 3));
}

TEST(Linear, ErrorsNameTheOpAndShapes) {
  expect_error(
      [] {
        linear(zeros({2, 3}), zeros({4, 5}));
      },
      ErrorKind::Shape, {"[linear]", "[2, 3] (float32)", "[4, 5] (float32)"});
  expect_error([] { linear(zeros({2, 3}), zeros({3})); }, ErrorKind::Shape, {"[linear]", "[3]"});
  expect_error(
      [] {
        linear(zeros({2, 3}), zeros({4, 3}), zeros({5}));
      },
      ErrorKind::Shape, {"[linear]", "[5]"});
  expect_error([] { linear(scalar_tensor(1.0), zeros({4, 3})); }, ErrorKind::Shape, {"[linear]"});
}

TEST(Dot, ValueGradientsAndErrors) {
  Tensor a = tensor({1.0, 2.0, 3.0}, DType::Float64).requires_grad_(true);
  Tensor b = tensor({4.0, -5.0, 6.0}, DType::Float64).requires_grad_(true);
  Tensor d = dot(a, b);
  EXPECT_EQ(d.dim(), 0);
  EXPECT_DOUBLE_EQ(d.item<double>(), 4.0 - 10.0 + 18.0);
  d.backward();
  expect_near(a.grad().to_vector<double>(), {4.0, -5.0, 6.0});  // d(a·b)/da = b
  expect_near(b.grad().to_vector<double>(), {1.0, 2.0, 3.0});
  Tensor strided = tensor({1.0, 9.0, 2.0, 9.0, 3.0, 9.0}).slice(0, 0, std::nullopt, 2);
  EXPECT_FLOAT_EQ(strided.dot(tensor({1.0, 1.0, 1.0})).item<float>(), 6.0f);
  EXPECT_EQ(dot(zeros({0}), zeros({0})).item<float>(), 0.0f);
  expect_error([] { dot(zeros({3}), zeros({4})); }, ErrorKind::Shape, {"[dot]", "[3]", "[4]"});
  expect_error([] { dot(zeros({3, 1}), zeros({3})); }, ErrorKind::Shape, {"[dot]", "[3, 1]"});
}

TEST(Outer, ValuesAndGradients) {
  Tensor a = tensor({1.0, 2.0}, DType::Float64).requires_grad_(true);
  Tensor b = tensor({3.0, 4.0, 5.0}, DType::Float64).requires_grad_(true);
  Tensor o = a.outer(b);
  ASSERT_EQ(o.shape(), Shape({2, 3}));
  expect_near(o.to_vector<double>(), {3, 4, 5, 6, 8, 10});
  o.sum().backward();
  expect_near(a.grad().to_vector<double>(), {12.0, 12.0});     // sum_j b_j
  expect_near(b.grad().to_vector<double>(), {3.0, 3.0, 3.0});  // sum_i a_i
  expect_error([] { outer(zeros({2, 2}), zeros({2})); }, ErrorKind::Shape, {"[outer]"});
}

TEST(Matmul, DoubleBackwardMatchesAnalyticHessianVectorProduct) {
  // f(A) = sum((A B)^2); df/dA = 2 (A B) Bᵀ; <df/dA, V> differentiated again = 2 (V B) Bᵀ.
  Tensor a = rnd({2, 3}), b = rnd({3, 4}, false), v = rnd({2, 3}, false);
  Tensor f = matmul(a, b).square().sum();
  Tensor ga = autograd::grad({f}, {a}, {}, std::nullopt, true)[0];
  Tensor hv = autograd::grad({(ga * v).sum()}, {a})[0];
  auto vb = naive_mm(v.to_vector<double>(), b.to_vector<double>(), 2, 3, 4);
  Tensor bt = b.t().contiguous();
  auto want = naive_mm(vb, bt.to_vector<double>(), 2, 4, 3);
  for (double& w : want) w *= 2;
  expect_near(hv.to_vector<double>(), want);
}
