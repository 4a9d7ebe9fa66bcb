// Tests of the fused gradient primitives gelu_backward, softmax_backward, log_softmax_backward,
// layer_norm_backward and cross_entropy_backward against the unfused composites of ops they replace
// (the oracles): values in float32 and float64 on the vectorised (contiguous) and strided paths,
// with broadcasting, and first and second derivatives of gelu, softmax, log_softmax, layer_norm and
// cross_entropy against the same functions written with ops. Also the vectorised softmax
// forward rows (masked -inf entries, NaN rows).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "ops/backward_ops.h"

using namespace adjoint;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor randn_t(const Shape& shape, uint64_t seed, DType dtype) {
  Generator gen(seed);
  return randn(shape, dtype, &gen);
}

Tensor uniform_t(const Shape& shape, double lo, double hi, uint64_t seed, DType dtype) {
  Generator gen(seed);
  return rand(shape, dtype, &gen) * (hi - lo) + lo;
}

Tensor leaf(const Tensor& t) { return t.detach().requires_grad_(true); }

// Elementwise |got - want| <= atol + rtol |want|, NaN matching NaN.
void expect_close(const Tensor& got, const Tensor& want, double atol, double rtol,
                  const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = got.to(DType::Float64).to_vector<double>();
  const std::vector<double> w = want.to(DType::Float64).to_vector<double>();
  int bad = 0;
  for (std::size_t i = 0; i < g.size() && bad < 5; ++i) {
    const bool ok = std::isnan(w[i]) ? std::isnan(g[i])
                                     : g[i] == w[i] ||  // infinities
                                           std::abs(g[i] - w[i]) <= atol + rtol * std::abs(w[i]);
    if (!ok) {
      ++bad;
      ADD_FAILURE() << what << " at " << i << ": got " << g[i] << ", want " << w[i];
    }
  }
}

// The unfused gelu and its derivative, written with ops (the rules gelu had before
// gelu_backward existed).
Tensor gelu_composite(const Tensor& x, GeluApproximation a) {
  if (a == GeluApproximation::None) return x * (erf(x * M_SQRT1_2) + 1) * 0.5;
  const double k = 0.7978845608028654;
  return x * (tanh((x + x * x.square() * 0.044715) * k) + 1) * 0.5;
}
Tensor gelu_prime_composite(const Tensor& x, GeluApproximation a) {
  if (a == GeluApproximation::None) {
    Tensor cdf = (erf(x * M_SQRT1_2) + 1) * 0.5;
    Tensor pdf = exp(x.square() * -0.5) * (M_2_SQRTPI * M_SQRT1_2 * 0.5);
    return cdf + x * pdf;
  }
  const double k = 0.7978845608028654;
  Tensor x2 = x.square();
  Tensor t = tanh((x + x * x2 * 0.044715) * k);
  return (t + 1) * 0.5 + x * (1 - t.square()) * (x2 * (3 * 0.044715) + 1) * (0.5 * k);
}

// The unfused softmax and log_softmax (inputs here are small, so no max shift is needed).
Tensor softmax_composite(const Tensor& x, int64_t dim) {
  Tensor e = exp(x);
  return e / sum(e, {dim}, true);
}
Tensor log_softmax_composite(const Tensor& x, int64_t dim) {
  return x - log(sum(exp(x), {dim}, true));
}

const GeluApproximation kForms[] = {GeluApproximation::None, GeluApproximation::Tanh};
const char* form_name(GeluApproximation a) { return a == GeluApproximation::Tanh ? "tanh" : "erf"; }

// ---- gelu_backward ----

TEST(GeluBackward, MatchesCompositeContiguousAndStrided) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    // float32 compares against the composite computed in float64
    const double atol = dt == DType::Float32 ? 2e-6 : 1e-13;
    const double rtol = dt == DType::Float32 ? 4e-6 : 1e-12;
    for (GeluApproximation a : kForms) {
      const std::string what = std::string(form_name(a)) + " " + std::string(to_string(dt));
      // 1003 elements: whole vectors plus a tail; wide range, including the far tails
      Tensor x = uniform_t({17, 59}, -12, 12, 1, dt);
      Tensor gy = randn_t({17, 59}, 2, dt);
      Tensor want = gy.to(DType::Float64) * gelu_prime_composite(x.to(DType::Float64), a);
      expect_close(gelu_backward(gy, x, a), want, atol, rtol, what + " contiguous");
      // Transposed operands take the strided (scalar) path.
      Tensor xt = x.t(), gt = gy.t();
      expect_close(gelu_backward(gt, xt, a), want.t(), atol, rtol, what + " strided");
      // Broadcasting x over rows.
      Tensor xr = x.select(0, 3);
      expect_close(gelu_backward(gy, xr, a),
                   gy.to(DType::Float64) * gelu_prime_composite(xr.to(DType::Float64), a), atol,
                   rtol, what + " broadcast");
    }
  }
}

TEST(GeluBackward, SpecialValues) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (GeluApproximation a : kForms) {
      Tensor x = tensor({0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, 1e4, -1e4}, dt);
      Tensor gy = ones({8}, dt);
      std::vector<double> got = gelu_backward(gy, x, a).to_vector<double>();
      EXPECT_EQ(got[0], 0.5);
      EXPECT_EQ(got[1], 0.5);
      EXPECT_NEAR(got[2], 0.5, 1e-7);
      EXPECT_NEAR(got[3], 0.5, 1e-7);
      EXPECT_EQ(got[4], 1.0);
      EXPECT_NEAR(got[5], 0.0, 1e-30);  // tiny and negative (float64 keeps -4e-195)
      EXPECT_EQ(got[6], 1.0);
      EXPECT_EQ(got[7], 0.0);
      Tensor nan = tensor({std::nan(""), 1.0}, dt);
      std::vector<double> n = gelu_backward(ones({2}, dt), nan, a).to_vector<double>();
      EXPECT_TRUE(std::isnan(n[0])) << form_name(a);
      EXPECT_FALSE(std::isnan(n[1])) << form_name(a);
    }
  }
}

TEST(GeluBackward, MixedDtypesAndEmpty) {
  Tensor x = randn_t({5}, 3, DType::Float64);
  Tensor gy = randn_t({5}, 4, DType::Float32);
  Tensor r = gelu_backward(gy, x, GeluApproximation::Tanh);
  EXPECT_EQ(r.dtype(), DType::Float64);
  EXPECT_EQ(gelu_backward(zeros({0, 3}), zeros({0, 3}), GeluApproximation::None).shape(),
            (Shape{0, 3}));
}

TEST(GeluBackward, GeluGradientsMatchComposite) {
  // First and second derivatives of gelu (now through gelu_backward and its own VJP) against
  // the composite of ops, in float64.
  for (GeluApproximation a : kForms) {
    Tensor x = leaf(uniform_t({6, 7}, -4, 4, 5, DType::Float64));
    Tensor v = randn_t({6, 7}, 6, DType::Float64);
    Tensor w = randn_t({6, 7}, 7, DType::Float64);
    auto first = [&](bool fused) {
      Tensor y = fused ? gelu(x, a) : gelu_composite(x, a);
      return autograd::grad({sum(y * v)}, {x}, {}, true, true)[0];
    };
    Tensor g_fused = first(true), g_comp = first(false);
    expect_close(g_fused, g_comp, 1e-13, 1e-12, std::string(form_name(a)) + " grad");
    Tensor h_fused = autograd::grad({sum(g_fused * w)}, {x})[0];
    Tensor h_comp = autograd::grad({sum(g_comp * w)}, {x})[0];
    expect_close(h_fused, h_comp, 1e-12, 1e-10, std::string(form_name(a)) + " second");
    // Third order: the gradient of gelu_backward's VJP itself.
    Tensor x3 = leaf(x.detach());
    auto third = [&](bool fused) {
      Tensor y = fused ? gelu(x3, a) : gelu_composite(x3, a);
      Tensor g = autograd::grad({sum(y * v)}, {x3}, {}, true, true)[0];
      Tensor h = autograd::grad({sum(g * w)}, {x3}, {}, true, true)[0];
      return autograd::grad({sum(h * v)}, {x3})[0];
    };
    expect_close(third(true), third(false), 1e-11, 1e-9, std::string(form_name(a)) + " third");
  }
}

// ---- softmax_backward / log_softmax_backward ----

struct SoftmaxCase {
  Shape gy_shape, y_shape;
  int64_t dim;
};

const SoftmaxCase kSoftmaxCases[] = {
    {{7, 133}, {7, 133}, -1},   // last dim, with a vector tail
    {{4, 6, 5}, {4, 6, 5}, 1},  // middle dim
    {{9, 70}, {9, 70}, 0},      // first dim, inner > 64 (two column blocks)
    {{3, 6, 5}, {6, 5}, -1},    // y broadcast over the leading dim
    {{5}, {2, 5}, 1},           // gy broadcast
};

TEST(SoftmaxBackward, MatchesComposite) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    const double atol = dt == DType::Float32 ? 2e-6 : 1e-14;
    const double rtol = dt == DType::Float32 ? 1e-5 : 1e-12;
    for (const SoftmaxCase& sc : kSoftmaxCases) {
      for (bool log : {false, true}) {
        const std::string what = std::string(log ? "log_softmax" : "softmax") + " " +
                                 std::string(to_string(dt)) + " dim " + std::to_string(sc.dim);
        Tensor gy = randn_t(sc.gy_shape, 10, dt);
        Tensor x = randn_t(sc.y_shape, 11, dt);
        Tensor y = log ? log_softmax(x, sc.dim) : softmax(x, sc.dim);
        // The oracle sees both operands at the broadcast shape.
        Tensor zero = zeros_like(gy.to(DType::Float64)) + zeros_like(y.to(DType::Float64));
        Tensor g64 = gy.to(DType::Float64) + zero, y64 = y.to(DType::Float64) + zero;
        Tensor want = log ? g64 - exp(y64) * sum(g64, {sc.dim}, true)
                          : y64 * (g64 - sum(g64 * y64, {sc.dim}, true));
        Tensor got = log ? log_softmax_backward(gy, y, sc.dim) : softmax_backward(gy, y, sc.dim);
        expect_close(got, want, atol, rtol, what);
        if (sc.gy_shape == sc.y_shape && sc.gy_shape.size() == 2) {
          Tensor gt = log ? log_softmax_backward(gy.t(), y.t(), 1 - (sc.dim + 2) % 2)
                          : softmax_backward(gy.t(), y.t(), 1 - (sc.dim + 2) % 2);
          expect_close(gt, want.t(), atol, rtol, what + " transposed");
        }
      }
    }
  }
}

TEST(SoftmaxBackward, EmptyAndScalar) {
  EXPECT_EQ(softmax_backward(zeros({0, 4}), zeros({0, 4}), -1).shape(), (Shape{0, 4}));
  EXPECT_EQ(log_softmax_backward(zeros({3, 0}), zeros({3, 0}), 1).shape(), (Shape{3, 0}));
  // 0-d: softmax of one element is 1, so its gradient is 0; log_softmax's is gy - gy = 0.
  Tensor s =
      softmax_backward(scalar_tensor(2.0, DType::Float64), scalar_tensor(1.0, DType::Float64), 0);
  EXPECT_EQ(s.item<double>(), 0.0);
}

TEST(SoftmaxBackward, SoftmaxGradientsMatchComposite) {
  // First and second derivatives of softmax and log_softmax against the composites, in
  // float64, along the last and a middle dim.
  for (bool log : {false, true}) {
    for (int64_t dim : {-1, 1}) {
      const std::string what =
          std::string(log ? "log_softmax" : "softmax") + " dim " + std::to_string(dim);
      Tensor x = leaf(randn_t({3, 5, 4}, 20, DType::Float64));
      Tensor v = randn_t({3, 5, 4}, 21, DType::Float64);
      Tensor w = randn_t({3, 5, 4}, 22, DType::Float64);
      auto f = [&](bool fused) {
        if (log) return fused ? log_softmax(x, dim) : log_softmax_composite(x, dim);
        return fused ? softmax(x, dim) : softmax_composite(x, dim);
      };
      Tensor g_fused = autograd::grad({sum(f(true) * v)}, {x}, {}, true, true)[0];
      Tensor g_comp = autograd::grad({sum(f(false) * v)}, {x}, {}, true, true)[0];
      expect_close(g_fused, g_comp, 1e-14, 1e-12, what + " grad");
      Tensor h_fused = autograd::grad({sum(g_fused * w)}, {x})[0];
      Tensor h_comp = autograd::grad({sum(g_comp * w)}, {x})[0];
      expect_close(h_fused, h_comp, 1e-13, 1e-11, what + " second");
    }
  }
}

// ---- layer_norm_backward ----

// Layer norm written with ops (the oracle).
Tensor layer_norm_composite(const Tensor& x, const std::vector<int64_t>& dims, const Tensor& w,
                            const Tensor& b, double eps) {
  Tensor mu = mean(x, dims, true);
  Tensor var = mean((x - mu).square(), dims, true);
  Tensor y = (x - mu) * rsqrt(var + eps);
  if (w.defined()) y = y * w;
  if (b.defined()) y = y + b;
  return y;
}

TEST(LayerNormBackward, MatchesComposite) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    const double atol = dt == DType::Float32 ? 1e-5 : 1e-13;
    const double rtol = dt == DType::Float32 ? 1e-5 : 1e-12;
    for (bool with_w : {true, false}) {
      Tensor x = randn_t({6, 5, 37}, 60, dt) * 2 + 0.5;
      Tensor gy = randn_t({6, 5, 37}, 61, dt);
      Tensor w = with_w ? randn_t({37}, 62, dt) : Tensor();
      Tensor x64 = x.to(DType::Float64), g64 = gy.to(DType::Float64);
      Tensor mu = mean(x64, {2}, true);
      Tensor rstd = rsqrt(mean((x64 - mu).square(), {2}, true) + 1e-5);
      Tensor xh = (x64 - mu) * rstd;
      Tensor g = with_w ? g64 * w.to(DType::Float64) : g64;
      Tensor want = rstd * (g - mean(g, {2}, true) - xh * mean(g * xh, {2}, true));
      Tensor got = layer_norm_backward(gy, x, w, mu.to(dt), rstd.to(dt), 1);
      expect_close(got, want, atol, rtol, std::string(to_string(dt)) + (with_w ? " w" : ""));
      // Strided gradient, two normalized dims.
      Tensor mu2 = mean(x64, {1, 2}, true);
      Tensor rstd2 = rsqrt(mean((x64 - mu2).square(), {1, 2}, true) + 1e-5);
      Tensor xh2 = (x64 - mu2) * rstd2;
      Tensor want2 = rstd2 * (g64 - mean(g64, {1, 2}, true) - xh2 * mean(g64 * xh2, {1, 2}, true));
      Tensor gyt = gy.transpose(0, 1).contiguous().transpose(0, 1);
      expect_close(layer_norm_backward(gyt, x, Tensor(), mu2.to(dt), rstd2.to(dt), 2), want2, atol,
                   rtol, "two dims");
    }
  }
}

TEST(LayerNormBackward, LayerNormGradientsMatchComposite) {
  // First and second derivatives of layer_norm (through layer_norm_backward and its VJP with
  // the statistics recomputed with ops) against the composite, in float64.
  Tensor x = leaf(randn_t({4, 3, 6}, 70, DType::Float64));
  Tensor w = leaf(randn_t({6}, 71, DType::Float64));
  Tensor b = leaf(randn_t({6}, 72, DType::Float64));
  Tensor v = randn_t({4, 3, 6}, 73, DType::Float64);
  Tensor u = randn_t({4, 3, 6}, 74, DType::Float64);
  auto grads = [&](bool fused) {
    Tensor y = fused ? layer_norm(x, {6}, w, b, 1e-5) : layer_norm_composite(x, {2}, w, b, 1e-5);
    return autograd::grad({sum(y * v)}, {x, w, b}, {}, true, true);
  };
  std::vector<Tensor> gf = grads(true), gc = grads(false);
  for (int i = 0; i < 3; ++i) expect_close(gf[i], gc[i], 1e-13, 1e-11, "grad " + std::to_string(i));
  std::vector<Tensor> hf = autograd::grad({sum(gf[0] * u)}, {x, w});
  std::vector<Tensor> hc = autograd::grad({sum(gc[0] * u)}, {x, w});
  for (int i = 0; i < 2; ++i)
    expect_close(hf[i], hc[i], 1e-12, 1e-10, "second " + std::to_string(i));
}

// ---- cross_entropy_backward ----

TEST(CrossEntropyBackward, MatchesComposite) {
  const std::vector<int64_t> tv = {0, 7, -100, 3, 255, 7, 1, 128};
  for (DType dt : {DType::Float32, DType::Float64}) {
    const double atol = dt == DType::Float32 ? 1e-7 : 1e-15;
    const double rtol = dt == DType::Float32 ? 2e-6 : 1e-12;
    Tensor x = randn_t({8, 256}, 40, dt) * 3;
    Tensor g = randn_t({8}, 41, dt);
    Tensor t = tensor(tv);
    Tensor x64 = x.to(DType::Float64), g64 = g.to(DType::Float64);
    Tensor onehot = eq(arange(256).unsqueeze(0), t.unsqueeze(1)).to(DType::Float64);
    Tensor want =
        where(ne(t, -100).unsqueeze(1), (softmax(x64, 1) - onehot) * g64.unsqueeze(1), 0.0);
    expect_close(cross_entropy_backward(g, x, t, -100), want, atol, rtol,
                 std::string(to_string(dt)));
    // Transposed logits (strided copy first) and one weight for every row.
    Tensor xt = x.t().contiguous().t();
    expect_close(cross_entropy_backward(g, xt, t, -100), want, atol, rtol, "strided");
    Tensor g1 = scalar_tensor(0.5, dt);
    Tensor want1 = where(ne(t, -100).unsqueeze(1), (softmax(x64, 1) - onehot) * 0.5, 0.0);
    expect_close(cross_entropy_backward(g1, x, t, -100), want1, atol, rtol, "broadcast weight");
  }
}

TEST(CrossEntropyBackward, CrossEntropyGradientsMatchComposite) {
  // First and second derivatives of cross_entropy (mean, sum and none) against
  // -log_softmax picked at the target, in float64, with an ignored row.
  Tensor t = tensor(std::vector<int64_t>{2, -100, 0, 4, 1});
  Tensor keep = ne(t, -100).unsqueeze(1).to(DType::Float64);
  Tensor onehot = eq(arange(6).unsqueeze(0), t.unsqueeze(1)).to(DType::Float64);
  for (Reduction red : {Reduction::Mean, Reduction::Sum, Reduction::None}) {
    Tensor x = leaf(randn_t({5, 6}, 50, DType::Float64));
    Tensor v = randn_t({5, 6}, 51, DType::Float64);
    Tensor w = randn_t({5}, 52, DType::Float64);
    auto loss = [&](bool fused) {
      if (fused) {
        Tensor l = cross_entropy(x, t, red, -100);
        return red == Reduction::None ? sum(l * w) : l;
      }
      Tensor per_row = -sum(log_softmax(x, 1) * onehot * keep, {1});
      if (red == Reduction::None) return sum(per_row * w);
      return red == Reduction::Sum ? sum(per_row) : sum(per_row) / 4.0;
    };
    Tensor g_fused = autograd::grad({loss(true)}, {x}, {}, true, true)[0];
    Tensor g_comp = autograd::grad({loss(false)}, {x}, {}, true, true)[0];
    expect_close(g_fused, g_comp, 1e-15, 1e-12, "grad");
    Tensor h_fused = autograd::grad({sum(g_fused * v)}, {x})[0];
    Tensor h_comp = autograd::grad({sum(g_comp * v)}, {x})[0];
    expect_close(h_fused, h_comp, 1e-14, 1e-11, "second");
  }
}

// ---- errors ----

TEST(FusedBackwardErrors, NameTheOp) {
  auto expect_op = [](auto f, ErrorKind kind, const std::string& op) {
    try {
      f();
      ADD_FAILURE() << "expected an error from " << op;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
    }
  };
  Tensor x = randn_t({2, 3}, 80, DType::Float32);
  expect_op(
      [&] {
        cross_entropy_backward(ones({2}), x, tensor(std::vector<int64_t>{0, 3}), -100);
      },
      ErrorKind::Index, "cross_entropy_backward");
  expect_op(
      [&] {
        cross_entropy_backward(ones({3}), x, tensor(std::vector<int64_t>{0, 1}), -100);
      },
      ErrorKind::Shape, "cross_entropy_backward");
  expect_op(
      [&] {
        layer_norm_backward(ones({2, 4}), x, Tensor(), zeros({2, 1}), ones({2, 1}), 1);
      },
      ErrorKind::Shape, "layer_norm_backward");
  expect_op(
      [&] {
        layer_norm_backward(ones({2, 3}), x, Tensor(), zeros({3, 1}), ones({3, 1}), 1);
      },
      ErrorKind::Shape, "layer_norm_backward");
  expect_op(
      [&] {
        layer_norm_backward(ones({2, 3}), x, ones({4}), zeros({2, 1}), ones({2, 1}), 1);
      },
      ErrorKind::Shape, "layer_norm_backward");
  expect_op([&] { softmax_backward(ones({2, 3}), x, 2); }, ErrorKind::Index, "softmax_backward");
  expect_op(
      [&] {
        log_softmax_backward(ones({2, 3}), x, -3);
      },
      ErrorKind::Index, "log_softmax_backward");
}

// ---- the vectorised softmax forward ----

TEST(SoftmaxForward, MaskedRowsMatchDoubleOracle) {
  // Causal-masked float32 rows as attention makes them: -inf above the diagonal.
  const int64_t n = 45;
  Tensor x = randn_t({n, n}, 30, DType::Float32) * 4;
  Tensor mask = gt(arange(n).unsqueeze(0), arange(n).unsqueeze(1));
  Tensor xm = masked_fill(x, mask, -kInf);
  Tensor want = softmax(xm.to(DType::Float64), -1);
  expect_close(softmax(xm, -1), want, 1e-7, 2e-6, "masked softmax");
  std::vector<float> y = softmax(xm, -1).to_vector<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = i + 1; j < n; ++j) ASSERT_EQ(y[i * n + j], 0.0f);
  Tensor lwant = log_softmax(xm.to(DType::Float64), -1);
  expect_close(log_softmax(xm, -1), lwant, 1e-6, 2e-6, "masked log_softmax");
}

TEST(SoftmaxForward, NanAndInfRows) {
  for (DType dt : {DType::Float32, DType::Float64}) {
    // A NaN anywhere in a row makes the row NaN; a row of -inf is NaN (0 / 0); +inf wins.
    Tensor x = tensor({1.0,   std::nan(""), 2.0,   3.0,   4.0,   5.0,   6.0,   7.0,   8.0,    //
                       -kInf, -kInf,        -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf,  //
                       1.0,   2.0,          3.0,   4.0,   5.0,   6.0,   7.0,   8.0,   std::nan("")},
                      {3, 9}, dt);
    std::vector<double> y = softmax(x, 1).to(DType::Float64).to_vector<double>();
    for (double v : y) EXPECT_TRUE(std::isnan(v)) << std::string(to_string(dt));
    Tensor big = tensor({1.0, 1e30, 2.0}, dt);
    std::vector<double> b = softmax(big, 0).to(DType::Float64).to_vector<double>();
    EXPECT_EQ(b[0], 0.0);
    EXPECT_EQ(b[1], 1.0);
    EXPECT_EQ(b[2], 0.0);
  }
}

}  // namespace
