// In-place ops inside compiled functions (Note [In-place ops under compile] in
// src/compile/trace.cpp): traced as the out-of-place op plus a write. The oracle is the same
// function run eagerly on copies of the same tensors; with no pass that reassociates
// arithmetic, compiled values equal eager ones bit for bit.
#include <gtest/gtest.h>

#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/export.h"
#include "adjoint/optim.h"
#include "support/expect.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_error;
using adjoint::testing::expect_same;

Tensor data(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, DType::Float64, &g);
}

CompileOptions strict() {
  CompileOptions o;
  o.on_graph_break = OnGraphBreak::Throw;
  return o;
}

// In place on values the function made: every later read sees the write.
std::vector<Tensor> writes_intermediates(const std::vector<Tensor>& in) {
  Tensor y = sin(in[0]);
  y.mul_(2.0);
  y.add_(in[1]);
  Tensor before_clamp = y * 1.0;
  y.clamp_(-0.5, 1.5);
  y -= in[1] * 0.25;
  Tensor z = zeros_like(y);
  z.copy_(y);
  z.div_(3.0);
  return {(y * z).sum(), before_clamp, z};
}

TEST(CompileInPlace, WritesToValuesTheFunctionMadeMatchEagerCode) {
  CompiledFunction c = compile(writes_intermediates, strict());
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const std::vector<Tensor> in = {data({4, 5}, seed), data({5}, seed + 10)};
    const std::vector<Tensor> got = c(in), want = writes_intermediates(in);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t k = 0; k < got.size(); ++k) expect_same(got[k], want[k]);
  }
  EXPECT_EQ(c.stats().traces, 1);
  EXPECT_EQ(c.stats().replays, 3);
}

TEST(CompileInPlace, GradientsThroughWrittenValuesMatchEagerCode) {
  CompiledFunction c = compile(writes_intermediates, strict());
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    const Tensor x = data({4, 5}, seed).requires_grad_(true);
    const Tensor b = data({5}, seed + 10).requires_grad_(true);
    const std::vector<Tensor> gc = autograd::grad({c({x, b})[0]}, {x, b});
    const std::vector<Tensor> ge = autograd::grad({writes_intermediates({x, b})[0]}, {x, b});
    expect_same(gc[0], ge[0]);
    expect_same(gc[1], ge[1]);
  }
}

TEST(CompileInPlace, VmapOfACompiledFunctionThatWritesMatchesALoop) {
  CompiledFunction c = compile(writes_intermediates, strict());
  const Tensor xs = data({3, 4, 5}, 7), b = data({5}, 8);
  auto per_example = [&](const Tensor& x) { return c({x, b})[0]; };
  const Tensor batched = vmap(per_example)(xs);
  for (int64_t i = 0; i < 3; ++i)
    expect_same(batched.select(0, i), writes_intermediates({xs.select(0, i), b})[0]);
}

// A scalar function that writes what it made, for the transforms of compile(f).
Tensor written_chain(const Tensor& x) {
  Tensor y = sin(x);
  y.mul_(2.0);
  y.add_(x);
  y.clamp_(-0.5, 1.5);
  return (y * y).sum();
}

TEST(CompileInPlace, JacobiansHessiansAndGradOfGradOfACompiledFunctionThatWrites) {
  CompiledFunction c = compile(written_chain, strict());
  const Tensor x = data({4}, 5) * 0.3;
  expect_same(jacrev([&](const Tensor& v) { return c(v); })(x), jacrev(written_chain)(x));
  expect_same(jacfwd([&](const Tensor& v) { return c(v); })(x), jacfwd(written_chain)(x));
  expect_same(hessian([&](const Tensor& v) { return c(v); })(x), hessian(written_chain)(x));
  const Tensor xl = x.detach().requires_grad_(true);
  const Tensor gc = autograd::grad({c(xl)}, {xl}, {}, std::nullopt, true)[0];
  const Tensor ge = autograd::grad({written_chain(xl)}, {xl}, {}, std::nullopt, true)[0];
  expect_same(autograd::grad({gc.sum()}, {xl})[0], autograd::grad({ge.sum()}, {xl})[0]);
  // On a view of a larger tensor, and on an empty one.
  const Tensor big = data({3, 4}, 6);
  expect_same(c(big.select(1, 2)), written_chain(big.select(1, 2)));
  expect_same(c(zeros({0}, DType::Float64)), written_chain(zeros({0}, DType::Float64)));
}

// An exponential moving average of an argument, kept in a captured tensor, and a step counter:
// writes the caller sees, made once per call.
TEST(CompileInPlace, WritesToCapturedTensorsAndArgumentsAreMadeAtEveryCall) {
  NoGradGuard no_grad;
  Tensor ema = zeros({6}, DType::Float64), count = zeros({}, DType::Float64);
  Tensor ema_eager = ema.clone(), count_eager = count.clone();
  auto update = [](Tensor& avg, Tensor& n, const Tensor& x) {
    avg.mul_(0.9).add_(x, 0.1);
    n.add_(1.0);
    return avg * 2.0;
  };
  CompiledFunction c = compile([&](const Tensor& x) { return update(ema, count, x); }, strict());
  for (uint64_t step = 1; step <= 5; ++step) {
    const Tensor x = data({6}, step);
    const Tensor got = c(x);
    const Tensor want = update(ema_eager, count_eager, x);
    expect_same(got, want);
    expect_same(ema, ema_eager);
    expect_same(count, count_eager);
  }
  EXPECT_EQ(count.item<double>(), 5.0);
  EXPECT_EQ(c.stats().traces, 1);
  const std::string path = ::testing::TempDir() + "adjoint_writes.graph";
  expect_error([&] { export_function(c, path); }, ErrorKind::NotImplemented,
               {"writes in place", "captured tensors"});

  // An argument written in place, read before and after the write.
  CompiledFunction bump = compile(
      [](const Tensor& x) {
        Tensor old = x * 1.0;
        Tensor w = x;
        w.add_(old);  // doubles the caller's tensor
        w.sub_(0.5);
        return old + x;  // x's new value
      },
      strict());
  Tensor x = data({3}, 9), x_eager = x.clone();
  for (int call = 0; call < 3; ++call) {
    const Tensor want = [&] {
      Tensor old = x_eager * 1.0;
      x_eager.add_(old);
      x_eager.sub_(0.5);
      return old + x_eager;
    }();
    expect_same(bump(x), want);
    expect_same(x, x_eager);
  }
}

TEST(CompileInPlace, FillZeroAndCopyIntoACapturedBuffer) {
  NoGradGuard no_grad;
  Tensor buf = data({2, 3}, 3), flag = ones({3});
  CompiledFunction c = compile(
      [&](const Tensor& x) {
        buf.copy_(x);  // broadcast from [3]
        flag.zero_();
        Tensor out = buf + flag;
        flag.fill_(7.0);
        return out;
      },
      strict());
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    const Tensor x = data({3}, seed + 20);
    expect_same(c(x), x.expand({2, 3}) + 0.0);
    expect_same(buf, x.expand({2, 3}).contiguous());
    expect_same(flag, full({3}, 7.0));
  }
}

TEST(CompileInPlace, AWriteToMemoryAnotherValueSharesIsRefused) {
  CompiledFunction c = compile(
      [](const Tensor& x) {
        Tensor y = x * 2.0;
        Tensor row = y.select(0, 1);
        row.add_(1.0);  // y would have to change too
        return y;
      },
      strict());
  expect_error(
      [&] {
        c(data({3, 2}, 1));
      },
      ErrorKind::NotImplemented, {"add_", "shares", "clone() it first"});

  // Without Throw, the function runs eagerly and the write happens once, through the view.
  CompileOptions o;
  o.warn = false;
  CompiledFunction lenient = compile(
      [](const Tensor& x) {
        Tensor row = x.select(0, 0);
        row.add_(1.0);
        return x * 1.0;
      },
      o);
  Tensor x = zeros({2, 2}, DType::Float64);
  lenient(x);
  expect_same(x, tensor({1.0, 1.0, 0.0, 0.0}, {2, 2}, DType::Float64));
  EXPECT_EQ(lenient.stats().graph_breaks, 1);
}

TEST(CompileInPlace, WritingTheCallersTensorsWhileComputingGradientsIsRefused) {
  Tensor stat = zeros({4}, DType::Float64);
  CompiledFunction c = compile(
      [&](const Tensor& x) {
        {
          NoGradGuard no_grad;
          stat.add_(x.detach());
        }
        return (x * x).sum();
      },
      strict());
  const Tensor x = data({4}, 2).requires_grad_(true);
  expect_error([&] { c(x); }, ErrorKind::NotImplemented, {"compile", "computes gradients"});
  expect_same(stat, zeros({4}, DType::Float64));  // the refused trace wrote nothing
}

// An optimizer step inside compile on gradients computed outside it is a graph break (their
// values come from outside the graph; a whole step is traced, tests/compile/
// compile_training_step_test.cpp), and the eager run after it steps once: before, fused Adam
// wrote the parameters while tracing and the eager run stepped them again.
TEST(CompileInPlace, AnOptimizerStepIsAGraphBreakAndStepsOnce) {
  for (bool adam : {false, true}) {
    Tensor w = data({5}, 4).requires_grad_(true);
    Tensor w_eager = w.detach().clone().requires_grad_(true);
    auto make = [&](const Tensor& p) -> std::unique_ptr<optim::Optimizer> {
      if (adam) return std::make_unique<optim::Adam>(std::vector<Tensor>{p}, optim::AdamOptions{});
      return std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions{.lr = 0.1});
    };
    std::unique_ptr<optim::Optimizer> opt = make(w), opt_eager = make(w_eager);
    CompileOptions o;
    o.warn = false;
    CompiledFunction step = compile(
        [&](const Tensor& x) {
          opt->step();
          return x * 1.0;
        },
        o);
    for (int i = 0; i < 3; ++i) {
      (w * w).sum().backward();
      (w_eager * w_eager).sum().backward();
      step(ones({1}));
      opt_eager->step();
      expect_same(w.detach(), w_eager.detach());
      opt->zero_grad();
      opt_eager->zero_grad();
    }
    EXPECT_EQ(step.stats().graph_breaks, 1) << (adam ? "Adam" : "SGD");
    EXPECT_TRUE(adjoint::testing::contains(step.dump(), "that it did not compute"));
  }
}

}  // namespace
