// adjoint::linalg under compile (docs/compile.md, "Graph breaks"): det, eigh, svd, lstsq and
// matrix_exp trace with OnGraphBreak::Throw, and the value-dependent choices they make (det's
// formula at a singular matrix, matrix_exp's number of squarings, lstsq's rank check, the
// 0 · (1 / gap) terms of eigh and svd) are made again by each replay, for that call's values:
// a function traced at one matrix and replayed at another agrees with eager code, and with
// independent oracles (the cofactor matrix from minors, finite differences, closed forms, the
// Padé composite matrix_exp used to be).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::testing;

namespace {

using Fn = std::function<Tensor(const Tensor&)>;

Tensor rnd(const Shape& s) {
  static Generator gen(23);
  return randn(s, DType::Float64, &gen);
}
Tensor mT(const Tensor& x) { return x.transpose(-2, -1); }
double max_abs(const Tensor& t) {
  return t.numel() == 0 ? 0.0 : t.abs().max().to(DType::Float64).item<double>();
}
/// A fixed weight for a scalar loss sum(W ∘ f(A)): no two neighbours equal.
Tensor weights_like(const Tensor& y) {
  return sin(arange(y.numel(), TensorOptions(y.dtype())) * 0.37 + 0.2).reshape(y.shape());
}

/// f compiled with graph breaks thrown, and without fusion, so that it equals eager code bit
/// for bit.
CompiledFunction strict(Fn f) {
  CompileOptions options;
  options.on_graph_break = OnGraphBreak::Throw;
  options.fuse_pointwise = false;
  options.warn = false;
  return compile([f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0])}; },
                 options);
}

struct ValueGrad {
  Tensor value, grad;
};
/// f(A) and the gradient of sum(W ∘ f(A)) w.r.t. A, through `call` (eager f or compiled).
ValueGrad value_grad(const std::function<Tensor(const Tensor&)>& call, const Tensor& a) {
  Tensor x = a.detach().clone().requires_grad_(true);
  Tensor y = call(x);
  Tensor g = autograd::grad({(y * weights_like(y)).sum()}, {x})[0];
  return {y.detach(), g};
}

void expect_bitwise(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    ASSERT_EQ(a[i], b[i]) << what << " at element " << i;
  }
}

/// Traces f at `traced`, then for each of `replayed` checks that the compiled call's value and
/// gradient are eager's, bit for bit, and that nothing was traced again. Returns eager's.
std::vector<ValueGrad> compiled_matches_eager(const Fn& f, const Tensor& traced,
                                              const std::vector<Tensor>& replayed) {
  CompiledFunction c = strict(f);
  auto compiled = [&](const Tensor& x) { return c({x})[0]; };
  value_grad(compiled, traced);
  std::vector<ValueGrad> out;
  for (std::size_t i = 0; i < replayed.size(); ++i) {
    const ValueGrad e = value_grad(f, replayed[i]), k = value_grad(compiled, replayed[i]);
    expect_bitwise(k.value, e.value, "value of call " + std::to_string(i));
    expect_bitwise(k.grad, e.grad, "gradient of call " + std::to_string(i));
    out.push_back(e);
  }
  EXPECT_EQ(c.stats().traces, 1);
  EXPECT_EQ(c.stats().graph_breaks, 0);
  // The tracing call runs its graph too.
  EXPECT_EQ(c.stats().replays, static_cast<int64_t>(replayed.size()) + 1);
  return out;
}

/// Runs f, expects an adjoint::Error, and returns "kind: message".
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return std::string(to_string(e.kind())) + ": " + e.what();
  }
  ADD_FAILURE() << "expected an adjoint::Error";
  return "";
}

/// The transposed adjugate (cofactor matrix) of a 3x3 A from its 2x2 minors: C_ij = (-1)^(i+j)
/// det(A without row i and column j).
Tensor cofactors_3x3(const Tensor& a) {
  const std::vector<double> v = a.to_vector<double>();
  auto at = [&](int i, int j) { return v[static_cast<std::size_t>(3 * i + j)]; };
  std::vector<double> c(9);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      const int r0 = i == 0 ? 1 : 0, r1 = i == 2 ? 1 : 2, c0 = j == 0 ? 1 : 0, c1 = j == 2 ? 1 : 2;
      const double minor = at(r0, c0) * at(r1, c1) - at(r0, c1) * at(r1, c0);
      c[static_cast<std::size_t>(3 * i + j)] = ((i + j) % 2 == 0 ? 1 : -1) * minor;
    }
  return tensor(c, Shape{3, 3});
}

// det: the SVD cofactor formula at singular matrices is chosen per call (and per matrix).
TEST(LinalgCompile, DetGradientAtASingularMatrixIsTheCofactorMatrix) {
  const Fn det = [](const Tensor& a) { return linalg::det(a); };
  const Tensor regular = rnd({3, 3}) + eye(3, std::nullopt, DType::Float64) * 4.0;
  // Rank 2 (row 2 = row 0 + row 1), and rank 1: det is 0, its gradient is not.
  const Tensor r = rnd({2, 3});
  const Tensor rank2 = cat({r, r.narrow(0, 0, 1) + r.narrow(0, 1, 1)}, 0);
  const Tensor rank1 = outer(rnd({3}), rnd({3}));
  const auto got = compiled_matches_eager(det, regular, {rank2, rank1, regular * 1.5});
  for (std::size_t i = 0; i < got.size(); ++i) {
    const Tensor a = std::vector<Tensor>{rank2, rank1, regular * 1.5}[i];
    // The loss is w · det(A) with the single weight w = sin(0.2).
    const Tensor want = cofactors_3x3(a) * std::sin(0.2);
    EXPECT_LT(max_abs(got[i].grad - want), 1e-12 * (1 + max_abs(want))) << i;
  }
  EXPECT_LT(std::abs(got[0].value.item<double>()), 1e-12);
}

TEST(LinalgCompile, DetOfABatchChoosesItsFormulaPerMatrix) {
  const Fn det = [](const Tensor& a) { return linalg::det(a); };
  const Tensor regular = rnd({3, 3}) + eye(3, std::nullopt, DType::Float64) * 4.0;
  const Tensor r = rnd({2, 3});
  const Tensor singular = cat({r, r.narrow(0, 0, 1) * 2.0}, 0);
  const Tensor batch = stack({regular, singular}, 0);
  const auto got = compiled_matches_eager(det, stack({regular, regular * 0.5}, 0), {batch});
  const Tensor w = weights_like(got[0].value);
  for (int64_t i = 0; i < 2; ++i) {
    const Tensor a = batch.select(0, i);
    const Tensor want = cofactors_3x3(a) * w.select(0, i);
    EXPECT_LT(max_abs(got[0].grad.select(0, i) - want), 1e-12 * (1 + max_abs(want))) << i;
  }
}

TEST(LinalgCompile, DetJvpAtASingularMatrix) {
  const Tensor r = rnd({2, 3});
  const Tensor singular = cat({r, r.narrow(0, 1, 1) * -3.0}, 0);
  const Tensor t = rnd({3, 3});
  CompiledFunction c = strict([](const Tensor& a) { return linalg::det(a); });
  jvp([&](const Tensor& x) { return c({x})[0]; }, rnd({3, 3}), t);  // traced at another matrix
  const auto got = jvp([&](const Tensor& x) { return c({x})[0]; }, singular, t);
  // d det = tr(adj(A) dA) = sum(C ∘ dA).
  const double want = (cofactors_3x3(singular) * t).sum().item<double>();
  EXPECT_NEAR(got.tangents.item<double>(), want, 1e-12 * (1 + std::abs(want)));
  EXPECT_EQ(c.stats().graph_breaks, 0);
}

/// The Padé composite matrix_exp was before it became one op (src/ops/linalg_matrix_exp.cpp
/// at 3a94f29): scaling and squaring written with matmul and solve, differentiated op by op.
Tensor composite_matrix_exp(const Tensor& A) {
  constexpr double b[] = {64764752532480000.0,
                          32382376266240000.0,
                          7771770303897600.0,
                          1187353796428800.0,
                          129060195264000.0,
                          10559470521600.0,
                          670442572800.0,
                          33522128640.0,
                          1323241920.0,
                          40840800.0,
                          960960.0,
                          16380.0,
                          182.0,
                          1.0};
  const double norm = A.detach().abs().sum({-2}).amax({-1}).max().item<double>();
  const int s = norm > 5.371920351148152
                    ? static_cast<int>(std::ceil(std::log2(norm / 5.371920351148152)))
                    : 0;
  const Tensor a = A * std::ldexp(1.0, -s);
  const Tensor id = eye(A.size(-1), std::nullopt, A.dtype());
  const Tensor a2 = matmul(a, a), a4 = matmul(a2, a2), a6 = matmul(a4, a2);
  const Tensor u = matmul(a, matmul(a6, a6 * b[13] + a4 * b[11] + a2 * b[9]) + a6 * b[7] +
                                 a4 * b[5] + a2 * b[3] + id * b[1]);
  const Tensor v = matmul(a6, a6 * b[12] + a4 * b[10] + a2 * b[8]) + a6 * b[6] + a4 * b[4] +
                   a2 * b[2] + id * b[0];
  Tensor r = linalg::solve(v - u, v + u);
  for (int i = 0; i < s; ++i) r = matmul(r, r);
  return r;
}

// matrix_exp: the number of squarings is chosen by each call (and for each matrix).
TEST(LinalgCompile, MatrixExpSquaresAsEachCallNeeds) {
  const Fn expm = [](const Tensor& a) { return linalg::matrix_exp(a); };
  // exp([[0, t], [-t, 0]]) is the rotation by t: ‖A‖₁ = t needs no squaring at t = 0.5 and
  // several at t = 40.
  auto rotation_generator = [](double t) {
    return tensor({0.0, t, -t, 0.0}, {2, 2}, DType::Float64);
  };
  const auto got = compiled_matches_eager(expm, rotation_generator(0.5),
                                          {rotation_generator(40.0), rotation_generator(3.0)});
  for (std::size_t i = 0; i < 2; ++i) {
    const double t = i == 0 ? 40.0 : 3.0;
    const Tensor want =
        tensor({std::cos(t), std::sin(t), -std::sin(t), std::cos(t)}, {2, 2}, DType::Float64);
    EXPECT_LT(max_abs(got[i].value - want), 1e-12 * (1 + t * t)) << t;
  }
  // A batch whose matrices need different numbers of squarings: each equals its own call.
  const Tensor a = rnd({3, 3});
  const Tensor batch = stack({a * 0.1, a * 30.0}, 0);
  const auto both = compiled_matches_eager(expm, stack({a, a}, 0), {batch});
  for (int64_t i = 0; i < 2; ++i) {
    const Tensor one = linalg::matrix_exp(batch.select(0, i));
    EXPECT_LT(max_abs(both[0].value.select(0, i) - one), 1e-14 * (1 + max_abs(one))) << i;
  }
}

TEST(LinalgCompile, MatrixExpGradientAgreesWithFiniteDifferencesAndTheComposite) {
  for (double scale : {0.5, 6.0}) {  // no squaring, and several
    const Tensor a = rnd({3, 3}) * scale;
    const Tensor w = weights_like(a);
    auto loss = [&](const Tensor& x) { return (linalg::matrix_exp(x) * w).sum(); };
    Tensor x = a.clone().requires_grad_(true);
    const Tensor g = autograd::grad({loss(x)}, {x})[0];
    // Central differences, entry by entry.
    const double h = 1e-6;
    std::vector<double> fd(9);
    for (int64_t k = 0; k < 9; ++k) {
      Tensor e = zeros({9}, DType::Float64);
      e = where(eq(arange(9, DType::Float64), static_cast<double>(k)), ones_like(e), e);
      e = e.reshape({3, 3}) * h;
      fd[static_cast<std::size_t>(k)] =
          (loss(a + e).item<double>() - loss(a - e).item<double>()) / (2 * h);
    }
    const Tensor want_fd = tensor(fd, Shape{3, 3});
    const double size = max_abs(g);
    EXPECT_LT(max_abs(g - want_fd), 1e-6 * (1 + size)) << scale;
    // The composite's gradient (the derivative of the approximant) agrees to rounding.
    Tensor y = a.clone().requires_grad_(true);
    const Tensor g_composite = autograd::grad({(composite_matrix_exp(y) * w).sum()}, {y})[0];
    EXPECT_LT(max_abs(g - g_composite), 1e-12 * (1 + size)) << scale;
    // Second order: the Hessian-vector product against differences of the gradient.
    const Tensor v = rnd({3, 3});
    Tensor z = a.clone().requires_grad_(true);
    const Tensor gz = autograd::grad({loss(z)}, {z}, {}, true, true)[0];
    const Tensor hv = autograd::grad({(gz * v).sum()}, {z})[0];
    auto grad_at = [&](const Tensor& p) {
      Tensor q = p.detach().clone().requires_grad_(true);
      return autograd::grad({loss(q)}, {q})[0];
    };
    const Tensor hv_fd = (grad_at(a + v * h) - grad_at(a - v * h)) / (2 * h);
    EXPECT_LT(max_abs(hv - hv_fd), 1e-5 * (1 + max_abs(hv))) << scale;
  }
}

// eigh and svd: the 0 · (1 / gap) terms are dropped entry by entry, with no value read.
TEST(LinalgCompile, EighEigenvaluesAtARepeatedEigenvalue) {
  // sum(w²) = tr(A²), whose gradient is 2A for a symmetric A, repeated eigenvalues or not.
  const Fn sum_sq = [](const Tensor& a) { return linalg::eigh(a).eigenvalues.square(); };
  const Tensor q = linalg::qr(rnd({3, 3})).q;
  const Tensor d = tensor({2.0, 2.0, -1.0}, DType::Float64);
  // Exactly equal eigenvalues (syevd of a diagonal matrix), and equal up to rounding.
  const Tensor exact = d.unsqueeze(-1) * eye(3, std::nullopt, DType::Float64);
  const Tensor repeated = matmul(q * d.unsqueeze(0), mT(q));
  const Tensor x = rnd({3, 3});
  const Tensor distinct = x + mT(x);
  const auto got = compiled_matches_eager(sum_sq, distinct, {exact, repeated, distinct * 2.0});
  // sum(W ∘ w²) with unequal weights W is not differentiable where two eigenvalues meet, but
  // its gradient stays finite (as eager's did, which skipped the eigenvector terms).
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(std::isfinite(got[i].grad.sum().item<double>())) << i;
  // With unit weights the oracle is exactly 2A.
  CompiledFunction c = strict([](const Tensor& a) { return linalg::eigh(a).eigenvalues; });
  c({distinct.clone().requires_grad_(true)});
  for (const Tensor& a : {exact, repeated}) {
    Tensor y = a.clone().requires_grad_(true);
    const Tensor g = autograd::grad({c({y})[0].square().sum()}, {y})[0];
    EXPECT_LT(max_abs(g - a * 2.0), 1e-12);
  }
  EXPECT_EQ(c.stats().graph_breaks, 0);
}

TEST(LinalgCompile, SvdSingularValuesAtRepeatedAndZeroValues) {
  // sum(S²) = ‖A‖_F²: gradient 2A, also where S has repeated values or, for a wide A, a zero.
  CompiledFunction c = strict([](const Tensor& a) { return linalg::svd(a).s; });
  auto grad_of_sum_sq = [&](const Tensor& a) {
    Tensor y = a.clone().requires_grad_(true);
    return autograd::grad({c({y})[0].square().sum()}, {y})[0];
  };
  grad_of_sum_sq(rnd({2, 3}));  // traced with distinct, nonzero singular values
  const Tensor rank1 =
      tensor({3.0, 0.0, 0.0, 0.0, 0.0, 0.0}, {2, 3}, DType::Float64);  // S = (3, 0)
  EXPECT_LT(max_abs(grad_of_sum_sq(rank1) - rank1 * 2.0), 1e-12);
  const Tensor tall_rank1 = mT(rank1).contiguous();
  grad_of_sum_sq(rnd({3, 2}));
  EXPECT_LT(max_abs(grad_of_sum_sq(tall_rank1) - tall_rank1 * 2.0), 1e-12);
  // An orthogonal A: S = (1, 1, 1), and d sum(S) = U Vh = A.
  CompiledFunction sum_s = strict([](const Tensor& a) { return linalg::svd(a).s.sum(); });
  sum_s({rnd({3, 3}).requires_grad_(true)});
  const Tensor q = linalg::qr(rnd({3, 3})).q;
  Tensor y = q.clone().requires_grad_(true);
  const Tensor g = autograd::grad({sum_s({y})[0]}, {y})[0];
  EXPECT_LT(max_abs(g - q), 1e-12);
  EXPECT_EQ(c.stats().graph_breaks + sum_s.stats().graph_breaks, 0);
}

TEST(LinalgCompile, EighAndSvdVectorsAgreeWithEager) {
  const Fn eig_function = [](const Tensor& a) {
    auto [w, v] = linalg::eigh(a);
    return matmul(v * w.exp().unsqueeze(-2), mT(v));
  };
  const Fn svd_product = [](const Tensor& a) {
    auto [u, s, vh] = linalg::svd(a);
    return matmul(u, vh) + s.sum();
  };
  const Tensor x = rnd({2, 3, 3}), y = rnd({2, 3, 3});
  compiled_matches_eager(eig_function, x + mT(x), {y + mT(y)});
  compiled_matches_eager(svd_product, rnd({4, 3}), {rnd({4, 3})});
}

TEST(LinalgCompile, ErrorsAreRaisedByTheReplayAsEagerRaisesThem) {
  // lstsq of a rank-deficient A, traced at a full-rank one.
  const Tensor b = rnd({4, 2});
  const Fn lstsq = [b](const Tensor& a) { return linalg::lstsq(a, b); };
  CompiledFunction c = strict(lstsq);
  const Tensor full = rnd({4, 3});
  const Tensor x = c({full})[0];
  // The normal equations Aᵀ (A X - B) = 0.
  EXPECT_LT(max_abs(matmul(mT(full), matmul(full, x) - b)), 1e-12);
  const Tensor r = rnd({4, 2});
  // A zero column: R[1, 1] of its QR is exactly 0, whatever the rounding.
  const Tensor deficient =
      cat({r.narrow(1, 0, 1), zeros({4, 1}, DType::Float64), r.narrow(1, 1, 1)}, 1);
  const std::string eager = error_of([&] { lstsq(deficient); });
  EXPECT_TRUE(contains(eager, "[lstsq] A is rank deficient")) << eager;
  EXPECT_EQ(error_of([&] { c({deficient}); }), eager);
  const Tensor wide_deficient = mT(deficient).contiguous();
  const Tensor b2 = rnd({3, 1});
  const Fn lstsq_wide = [b2](const Tensor& a) { return linalg::lstsq(a, b2); };
  CompiledFunction cw = strict(lstsq_wide);
  cw({rnd({3, 4})});
  EXPECT_EQ(error_of([&] { cw({wide_deficient}); }), error_of([&] { lstsq_wide(wide_deficient); }));
  EXPECT_EQ(c.stats().traces, 1);
  EXPECT_EQ(cw.stats().traces, 1);
  // eigh and svd refuse a NaN matrix (det never throws).
  const Tensor bad =
      where(ne(arange(9, DType::Float64).reshape({3, 3}), 4.0), rnd({3, 3}), std::nan(""));
  CompiledFunction ce = strict([](const Tensor& a) { return linalg::eigh(a).eigenvalues; });
  ce({eye(3, std::nullopt, DType::Float64)});
  EXPECT_EQ(error_of([&] { ce({bad}); }), error_of([&] { linalg::eigh(bad); }));
  CompiledFunction cs = strict([](const Tensor& a) { return linalg::svd(a).s; });
  cs({eye(3, std::nullopt, DType::Float64)});
  EXPECT_EQ(error_of([&] { cs({bad}); }), error_of([&] { linalg::svd(bad); }));
  EXPECT_EQ(c.stats().graph_breaks + cw.stats().graph_breaks + ce.stats().graph_breaks +
                cs.stats().graph_breaks,
            0);
}

TEST(LinalgCompile, MatrixExpLetsNonFiniteValuesThrough) {
  // A NaN or inf in one matrix of the batch propagates into its result only (no squaring is
  // chosen from a NaN norm), eager and compiled alike.
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    const Tensor a = rnd({2, 3, 3}) * 4.0;
    const Tensor poisoned = where(ne(arange(18, DType::Float64).reshape({2, 3, 3}), 13.0), a, bad);
    CompiledFunction c = strict([](const Tensor& x) { return linalg::matrix_exp(x); });
    c({a});
    for (const Tensor& y : {linalg::matrix_exp(poisoned), c({poisoned})[0]}) {
      EXPECT_TRUE(std::isfinite(y.select(0, 0).sum().item<double>())) << bad;
      EXPECT_FALSE(std::isfinite(y.select(0, 1).sum().item<double>())) << bad;
      EXPECT_LT(max_abs(y.select(0, 0) - linalg::matrix_exp(a.select(0, 0))), 1e-9);
    }
  }
}

}  // namespace
