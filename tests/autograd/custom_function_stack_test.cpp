// Custom functions pass the dispatch stack as one call (Note [Custom functions in the stack] in
// src/autograd/function.cpp): observers see them under their name around their forward's ops,
// a function of several outputs keeps them all, vmap batches them through their forward and
// backward, a checkpointed region with a policy logs their forward's ops, and compile's Trace
// layer hands them the values the function holds (a tensor written in place while tracing).
// The oracles: the formulas written out, loops over examples, the same code run eagerly.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "autograd/op_cost.h"
#include "dispatch/op_observer.h"
#include "support/expect.h"

namespace adjoint {
namespace {

using adjoint::testing::expect_error;

double max_diff(const Tensor& a, const Tensor& b) {
  return abs(a.to(DType::Float64) - b.to(DType::Float64)).max().item<double>();
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

// sin and cos of a scaled input: two outputs, a non-tensor argument.
struct SinCos : Function<SinCos> {
  static std::string name() { return "sincos"; }
  static std::vector<Tensor> forward(FunctionCtx& ctx, const Tensor& x, double scale) {
    ctx.save_for_backward({x});
    ctx.saved_data["scale"] = scale;
    return {sin(x * scale), cos(x * scale)};
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    const Tensor x = ctx.get_saved()[0];
    const double s = std::any_cast<double>(ctx.saved_data["scale"]);
    return {(g[0] * cos(x * s) - g[1] * sin(x * s)) * s};
  }
};

// The square root, for inputs it checks are not negative (reading values, as a solver's
// forward does).
struct CheckedSqrt : Function<CheckedSqrt> {
  static std::string name() { return "checked_sqrt"; }
  static Tensor forward(FunctionCtx& ctx, const Tensor& x) {
    ADJOINT_CHECK(x.min().item<double>() >= 0, Value, "checked_sqrt", "a negative input");
    Tensor y = sqrt(x);
    ctx.save_for_backward({y});
    return y;
  }
  static std::vector<Tensor> backward(FunctionCtx& ctx, std::vector<Tensor> g) {
    return {g[0] * 0.5 / ctx.get_saved()[0]};
  }
};

struct Nothing : Function<Nothing> {
  static std::string name() { return "returns_nothing"; }
  static std::vector<Tensor> forward(FunctionCtx&, const Tensor&) { return {}; }
  static std::vector<Tensor> backward(FunctionCtx&, std::vector<Tensor> g) { return g; }
};

// The ops an observer saw begin and end, in order.
struct OpEvents : detail::OpObserver {
  std::vector<std::string> events;
  std::vector<std::string> grad_fns;  // of the results the Observe layer reported
  void before_forward_op(const char* op) override { events.push_back(std::string("+") + op); }
  void forward_op_tensors(const char* op, const Tensor*, std::size_t, const Tensor& out) override {
    if (std::string(op) == "cube" || std::string(op) == "sincos")
      grad_fns.push_back(out.grad_fn() ? out.grad_fn()->name() : "none");
  }
  void after_forward_op(const char* op) override { events.push_back(std::string("-") + op); }
};

TEST(CustomFunctionStack, ObserversSeeItAroundItsForwardsOps) {
  const Tensor x = randn({4}, DType::Float64).requires_grad_(true);
  OpEvents seen;
  detail::set_op_observer(&seen);
  const Tensor y = Cube::apply(x);
  detail::set_op_observer(nullptr);
  ASSERT_GE(seen.events.size(), 4u);
  EXPECT_EQ(seen.events.front(), "+cube");
  EXPECT_EQ(seen.events.back(), "-cube");
  // x * x * x: two multiplications inside the function's span
  EXPECT_EQ(std::count(seen.events.begin(), seen.events.end(), "+mul"), 2);
  // The observer meets the result with its node in place, as for any op.
  ASSERT_EQ(seen.grad_fns.size(), 1u);
  EXPECT_EQ(seen.grad_fns[0], "cubeBackward");
  EXPECT_EQ(max_diff(y, x * x * x), 0);
}

// The graph recorder is an observer too: it meets the function's node as it is made (its
// forward's ops run without recording and leave none), and its backward step runs.
TEST(CustomFunctionStack, TheGraphRecorderSeesItsNode) {
  const Tensor x = randn({3}, DType::Float64).requires_grad_(true);
  GraphRecorder rec;
  const Tensor y = (Cube::apply(x) * 2.0).sum();
  rec.stop_forward();
  EXPECT_EQ(rec.num_forward_ops(), 3u);  // cube, mul, sum
  y.backward();
  EXPECT_EQ(rec.num_backward_steps(), 4u);  // sum, mul, cube, x's accumulation
  EXPECT_LT(max_diff(x.grad(), x * x * 6.0), 1e-14);
}

// A FLOP count through a custom function is its forward's: the call itself adds nothing.
TEST(CustomFunctionStack, ItsFlopsAreItsForwardsOps) {
  const Tensor x = randn({5});
  struct Flops : detail::OpObserver {
    uint64_t total = 0;
    void forward_op_tensors(const char* op, const Tensor* in, std::size_t n,
                            const Tensor& out) override {
      total += detail::op_flops(op, in, n, out);
    }
  };
  Flops through, direct;
  detail::set_op_observer(&through);
  (void)Cube::apply(x);
  detail::set_op_observer(&direct);
  (void)(x * x * x);
  detail::set_op_observer(nullptr);
  EXPECT_EQ(through.total, direct.total);
  EXPECT_EQ(direct.total, 10u);  // two multiplications of 5 elements
}

TEST(CustomFunctionStack, SeveralOutputsKeepTheirValuesAndGradients) {
  const Tensor x = randn({5}, DType::Float64).requires_grad_(true);
  OpEvents seen;
  detail::set_op_observer(&seen);
  const std::vector<Tensor> out = SinCos::apply(x, 0.5);
  detail::set_op_observer(nullptr);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(std::count(seen.events.begin(), seen.events.end(), "+sincos"), 1);
  EXPECT_LT(max_diff(out[0], sin(x * 0.5)), 1e-15);
  EXPECT_LT(max_diff(out[1], cos(x * 0.5)), 1e-15);
  EXPECT_EQ(out[0].grad_fn().get(), out[1].grad_fn().get());  // one node, two outputs
  // d/dx (2 sin(x/2) + 3 cos(x/2)) = cos(x/2) - 1.5 sin(x/2)
  const Tensor g = autograd::grad({(out[0] * 2.0 + out[1] * 3.0).sum()}, {x})[0];
  const Tensor want = cos(x * 0.5) - sin(x * 0.5) * 1.5;
  EXPECT_LT(max_diff(g, want), 1e-14);
}

TEST(CustomFunctionStack, VmapBatchesItsForwardAndBackwardLikeTheLoop) {
  const Tensor xs = randn({3, 4}, DType::Float64);
  // Per-example gradients of sum(sin(x/2)² · cube(x)) through both functions.
  auto f = [](const Tensor& x) {
    const std::vector<Tensor> sc = SinCos::apply(x, 0.5);
    return (sc[0] * sc[0] * Cube::apply(x) + sc[1]).sum();
  };
  const Tensor batched = vmap(grad(f))(xs);
  const Tensor values = vmap(f)(xs);
  for (int64_t i = 0; i < 3; ++i) {
    const Tensor x = xs.select(0, i);
    EXPECT_LT(max_diff(batched.select(0, i), grad(f)(x)), 1e-13) << "example " << i;
    EXPECT_LT(max_diff(values.select(0, i), f(x)), 1e-13) << "example " << i;
  }
  // The same gradient by finite differences of the first example's first coordinate.
  const Tensor x0 = xs.select(0, 0);
  Tensor e = zeros({4}, DType::Float64);
  e.select(0, 0).fill_(1.0);
  const double h = 1e-6;
  const double fd = (f(x0 + e * h).item<double>() - f(x0 - e * h).item<double>()) / (2 * h);
  EXPECT_NEAR(batched.select(0, 0).select(0, 0).item<double>(), fd, 1e-7);
}

TEST(CustomFunctionStack, ASelectiveCheckpointRecomputesItsForwardAndMatchesEagerCode) {
  auto region = [](const std::vector<Tensor>& xs) {
    const Tensor h = sin(xs[0]) * xs[1];
    return (Cube::apply(h) * h).sum();
  };
  const Tensor x = randn({6}, DType::Float64).requires_grad_(true);
  const Tensor b = randn({6}, DType::Float64).requires_grad_(true);
  const auto eager = autograd::grad({region({x, b})}, {x, b});
  CheckpointOptions options;
  options.policy = save_ops({"sin"});  // turns the OpCache layer on
  cube_forwards = 0;
  const Tensor loss = checkpoint(region, {x, b}, options);
  const auto got = autograd::grad({loss}, {x, b});
  EXPECT_EQ(cube_forwards, 2);  // the first run and the recomputation
  EXPECT_EQ(max_diff(loss, region({x, b})), 0);
  EXPECT_EQ(max_diff(got[0], eager[0]), 0);
  EXPECT_EQ(max_diff(got[1], eager[1]), 0);
}

TEST(CustomFunctionStack, UnderCompileItReadsWhatAnInPlaceWriteLeft) {
  // While tracing nothing is written: h.add_ leaves its value to the Trace layer, which must
  // hand that value, not h's memory, to the custom function (whose forward runs at the trace
  // as at each replay).
  auto f = [](const Tensor& x) {
    Tensor h = x * x * -1.0;  // negative until the write below
    h.add_(x * x * 2.0);
    return CheckedSqrt::apply(h).sum();  // sum |x|
  };
  CompileOptions options;
  options.on_graph_break = OnGraphBreak::Throw;
  options.warn = false;
  CompiledFunction c = compile(f, options);
  for (double v : {0.5, -1.5}) {
    const Tensor x = full({3}, v, DType::Float64).requires_grad_(true);
    const Tensor y = c(x);
    EXPECT_EQ(max_diff(y, f(x)), 0) << v;
    const Tensor g = autograd::grad({y}, {x})[0];
    EXPECT_LT(max_diff(y, full({}, 3 * std::abs(v), DType::Float64)), 1e-12);
    EXPECT_LT(max_diff(g, full({3}, v > 0 ? 1.0 : -1.0, DType::Float64)), 1e-12);  // d|x|/dx
  }
  EXPECT_EQ(c.stats().traces, 1);
}

TEST(CustomFunctionStack, AForwardThatReturnsNothingIsANamedError) {
  expect_error([] { (void)Nothing::apply(ones({2})); }, ErrorKind::Value,
               {"returns_nothing", "no tensors"});
}

}  // namespace
}  // namespace adjoint
