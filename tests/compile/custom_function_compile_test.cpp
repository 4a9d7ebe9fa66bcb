// Custom functions under compile (Note [Custom functions under compile] in adjoint/autograd.h):
// one node of the graph that calls the function again at every replay, on the replay's tensors;
// its backward traced as ops. The solvers built on custom functions (linear_solve, fixed_point,
// root) trace without a graph break, and a replay checks convergence for its own values. Eager
// calls are the oracle throughout.
#include <gtest/gtest.h>

#include <filesystem>

#include "adjoint/adjoint.h"
#include "support/expect.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_error;

CompileOptions throwing() {
  CompileOptions o;
  o.on_graph_break = OnGraphBreak::Throw;
  o.warn = false;
  return o;
}

void expect_close(const Tensor& got, const Tensor& want, double tol = 1e-12) {
  ASSERT_TRUE(got.defined());
  ASSERT_EQ(got.shape(), want.shape());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], w[i], tol) << "element " << i;
}

// compile of f(a, b): the list form.
template <class F>
CompiledFunction compile2(F f, CompileOptions options) {
  return compile(
      [f](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in[0], in[1])}; }, options);
}

int cube_forwards = 0;

struct Cube : Function<Cube> {
  static std::string name() { return "cube"; }
  static Tensor forward(FunctionCtx& ctx, const Tensor& x) {
    ++cube_forwards;
    ctx.save_for_backward({x});
    return x * x * x;
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    const Tensor x = ctx.get_saved()[0];
    return {g[0] * 3.0 * x * x};
  }
};

TEST(CustomFunctionCompile, IsOneNodeCalledAgainAtEveryReplay) {
  CompiledFunction c =
      compile([](const Tensor& x) { return Cube::apply(x * 2.0) + x; }, throwing());
  cube_forwards = 0;
  for (double v : {0.5, -1.25, 3.0}) {
    Tensor x = full({3}, v, DType::Float64).requires_grad_(true);
    Tensor y = c(x);
    const double want = 8 * v * v * v + v;
    for (double e : y.to_vector<double>()) EXPECT_DOUBLE_EQ(e, want);
    // d/dx (2x)³ + x = 24 x² + 1, through the traced backward of the user's rule
    Tensor g = autograd::grad({y.sum()}, {x})[0];
    for (double e : g.to_vector<double>()) EXPECT_DOUBLE_EQ(e, 24 * v * v + 1);
  }
  EXPECT_EQ(cube_forwards, 4);  // the trace's call, then one per replay (the first call's too)
  EXPECT_EQ(c.stats().traces, 1);
  EXPECT_EQ(c.stats().replays, 3);
  const std::string dump = c.dump(false);
  EXPECT_NE(dump.find("cube"), std::string::npos) << dump;
}

TEST(CustomFunctionCompile, SecondDerivativesThroughTheTracedBackward) {
  CompiledFunction c = compile([](const Tensor& x) { return Cube::apply(x).sum(); }, throwing());
  for (double v : {0.5, 2.0}) {
    Tensor x = full({2}, v, DType::Float64).requires_grad_(true);
    Tensor g = autograd::grad({c(x)}, {x}, {}, false, true)[0];
    Tensor h = autograd::grad({g.sum()}, {x})[0];
    for (double e : h.to_vector<double>()) EXPECT_DOUBLE_EQ(e, 6 * v);  // d²/dx² x³
  }
}

struct Split : Function<Split> {
  static std::string name() { return "split_in_two"; }
  static std::vector<Tensor> forward(FunctionCtx&, const Tensor& x) { return {x * 2.0, x * 3.0}; }
  static std::vector<Tensor> backward(FunctionCtx&, std::vector<Tensor> g) {
    return {g[0] * 2.0 + g[1] * 3.0};
  }
};

TEST(CustomFunctionCompile, SeveralOutputsStopTheTraceByName) {
  auto f = [](const Tensor& x) {
    std::vector<Tensor> parts = Split::apply(x);
    return parts[0] + parts[1];
  };
  expect_error([&] { compile(f, throwing())(ones({2})); }, ErrorKind::NotImplemented,
               {"split_in_two", "several tensors"});
  CompileOptions eager;
  eager.warn = false;
  CompiledFunction c = compile(f, eager);  // runs eagerly, and right
  EXPECT_EQ(c(full({2}, 2.0)).to_vector<double>(), (std::vector<double>{10.0, 10.0}));
  EXPECT_EQ(c.stats().graph_breaks, 1);
}

Tensor mv(const Tensor& m, const Tensor& u) { return matmul(m, u.unsqueeze(1)).squeeze(1); }

LinearSolveOptions tight(KrylovMethod method) {
  LinearSolveOptions o;
  o.method = method;
  o.krylov.rtol = 1e-13;
  o.krylov.atol = 1e-15;
  return o;
}

TEST(CustomFunctionCompile, LinearSolveTracesAndSolvesEachReplaysSystem) {
  for (KrylovMethod method : {KrylovMethod::GMRES, KrylovMethod::CG}) {
    auto f = [method](const Tensor& m, const Tensor& b) {
      LinearOperator A = [method](const Tensor& u, const std::vector<Tensor>& p) {
        return method == KrylovMethod::CG ? mv(p[0], mv(p[0].t(), u)) + u * 4.0
                                          : mv(p[0], u) + u * 4.0;
      };
      return linear_solve(A, b, {m}, tight(method)).square().sum();
    };
    CompiledFunction c = compile2(f, throwing());
    for (uint64_t seed : {1, 2, 3}) {
      Generator gen(seed);
      Tensor m = randn({4, 4}, DType::Float64, &gen).requires_grad_(true);
      Tensor b = randn({4}, DType::Float64, &gen).requires_grad_(true);
      Tensor got = c({m, b})[0];
      std::vector<Tensor> got_g = autograd::grad({got}, {m, b});
      Tensor want = f(m, b);
      std::vector<Tensor> want_g = autograd::grad({want}, {m, b});
      expect_close(got, want);
      expect_close(got_g[0], want_g[0], 1e-10);
      expect_close(got_g[1], want_g[1], 1e-10);
    }
    EXPECT_EQ(c.stats().graph_breaks, 0);
    EXPECT_EQ(c.stats().traces, 1);
  }
}

TEST(CustomFunctionCompile, RootTakesEachReplaysFirstGuess) {
  // z² = p has two roots; Newton from x0 finds the one on x0's side, so a replay that kept the
  // traced call's x0 would return the wrong sign.
  auto f = [](const Tensor& x0, const Tensor& p) {
    ImplicitFn g = [](const Tensor& z, const std::vector<Tensor>& q) { return z * z - q[0]; };
    return root(g, x0, {p});
  };
  CompiledFunction c = compile2(f, throwing());
  for (double start : {1.0, -1.0, 2.0}) {
    Tensor x0 = full({2}, start, DType::Float64);
    Tensor p = tensor({4.0, 9.0}, DType::Float64).requires_grad_(true);
    Tensor z = c({x0, p})[0];
    const double sign = start > 0 ? 1.0 : -1.0;
    expect_close(z, tensor({2.0 * sign, 3.0 * sign}, DType::Float64), 1e-9);
    // dz/dp = 1 / (2 z)
    Tensor g = autograd::grad({z.sum()}, {p})[0];
    expect_close(g, tensor({0.25 * sign, sign / 6.0}, DType::Float64), 1e-8);
  }
  EXPECT_EQ(c.stats().traces, 1);
}

TEST(CustomFunctionCompile, AReplayChecksConvergenceForItsOwnValues) {
  // x = a x + 1 converges for |a| < 1; the replay with a = 2 diverges and says so, as eager
  // code does, instead of replaying the traced call's answer.
  auto f = [](const Tensor& a) {
    ImplicitFn map = [](const Tensor& x, const std::vector<Tensor>& p) { return x * p[0] + 1.0; };
    return fixed_point(map, zeros({1}, DType::Float64), {a});
  };
  CompiledFunction c = compile(f, throwing());
  expect_close(c(full({1}, 0.5, DType::Float64)), full({1}, 2.0, DType::Float64), 1e-9);
  expect_error([&] { c(full({1}, 2.0, DType::Float64)); }, ErrorKind::Value,
               {"fixed_point", "did not converge"});
}

TEST(CustomFunctionCompile, AClosureHoldingATracedTensorStopsTheTrace) {
  // The operator captures m2, computed inside the compiled function: a replay would hand the
  // node the traced call's m2. The trace refuses it by name; eagerly it is right.
  auto f = [](const Tensor& m, const Tensor& b) {
    Tensor m2 = m * 2.0;
    LinearOperator A = [m2](const Tensor& u, const std::vector<Tensor>&) {
      return mv(m2, u) + u * 8.0;
    };
    return linear_solve(A, b, {}, tight(KrylovMethod::GMRES));
  };
  Generator gen(7);
  Tensor m = randn({3, 3}, DType::Float64, &gen);
  Tensor b = randn({3}, DType::Float64, &gen);
  expect_error(
      [&] {
        compile2(f, throwing())({m, b});
      },
      ErrorKind::NotImplemented, {"linear_solve", "not as an argument"});
  CompileOptions eager;
  eager.warn = false;
  CompiledFunction c = compile2(f, eager);
  for (double scale : {1.0, 0.5}) expect_close(c({m * scale, b})[0], f(m * scale, b));
}

TEST(CustomFunctionCompile, UnderVmapOrJvpInsideTheTraceStopsItByName) {
  auto f = [](const Tensor& x) { return Cube::apply(x); };
  expect_error(
      [&] {
        compile([&](const Tensor& x) { return vmap(f)(x); }, throwing())(ones({2, 3}));
      },
      ErrorKind::NotImplemented, {"cube", "vmap"});
  expect_error(
      [&] {
        compile([&](const Tensor& x) { return jvp(f, x, ones_like(x)).tangents; },
                throwing())(ones({3}));
      },
      ErrorKind::NotImplemented, {"cube"});
}

TEST(CustomFunctionCompile, TransformsOfTheCompiledFunctionMeetItsRules) {
  auto f = [](const Tensor& x) { return Cube::apply(x).sum(); };
  CompiledFunction c = compile(f, throwing());
  Tensor xs = tensor({0.5, -1.0, 2.0, 1.5, 0.25, -0.75}, Shape{2, 3}, DType::Float64);
  expect_close(vmap([&](const Tensor& x) { return c(x); })(xs), vmap(f)(xs));
  Tensor x = xs.select(0, 0);
  expect_close(jacrev([&](const Tensor& v) { return Cube::apply(c(v) * v); })(x),
               jacrev([&](const Tensor& v) { return Cube::apply(f(v) * v); })(x));
  expect_close(grad([&](const Tensor& v) { return c(v); })(x), x * x * 3.0);
}

TEST(CustomFunctionCompile, ExportRefusesItByName) {
  CompiledFunction c = compile([](const Tensor& x) { return Cube::apply(x); }, throwing());
  c(ones({2}));
  const std::string path = ::testing::TempDir() + "custom_function_export.json";
  expect_error([&] { export_function(c, path); }, ErrorKind::Value,
               {"cube", "custom autograd function"});
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
