// compile's dynamic sizes (CompileOptions::dynamic, Note [Dynamic sizes] in
// src/compile/dynamic_sizes.cpp): two sizes traced and more probed, then graphs built for new
// sizes without running the function. Eager code at each size is the oracle: the built graph
// must give its values and gradients bit for bit, as a trace at that size would. Also what is
// refused (and then traced size by size, still equal to eager code), the cache, the errors.
#include <gtest/gtest.h>

#include <functional>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "support/expect.h"

namespace {

using namespace adjoint;
using adjoint::testing::expect_error;

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_TRUE(want.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>()) << what;
}

CompileOptions batch_dynamic(std::vector<DynamicDim> dims = {{0, 0}}) {
  CompileOptions o;
  o.dynamic = std::move(dims);
  o.warn = false;
  return o;
}

// Ops whose attributes hold the batch: a reshape merging it (B * 3), an expand to it, a mean
// over it (scale 1 / (12 B)), a sum_to in the backward, a transpose and matmul around them.
struct BatchModel {
  Tensor w, b;
  BatchModel() {
    Generator g(3);
    w = randn({4, 4}, DType::Float64, &g).requires_grad_(true);
    b = randn({1, 4}, DType::Float64, &g).requires_grad_(true);
  }
  std::vector<Tensor> operator()(const std::vector<Tensor>& in) const {
    const Tensor& x = in[0];  // [B, 3, 4]
    const int64_t batch = x.size(0);
    Tensor rows = x.reshape({batch * 3, 4});
    Tensor h = tanh(matmul(rows, w) + b.expand({batch * 3, 4}));
    Tensor per_example = h.reshape({batch, 12}).sum({1});
    Tensor loss = (h * h).mean() + per_example.mean();
    return {loss, per_example};
  }
};

Tensor batch_of(int64_t n, uint64_t seed) {
  Generator g(seed);
  return randn({n, 3, 4}, DType::Float64, &g).requires_grad_(true);
}

void expect_as_eager(const CompiledFunction& c, const BatchModel& model, int64_t n) {
  const std::string at = "batch " + std::to_string(n);
  Tensor xc = batch_of(n, 10 + n), xe = batch_of(n, 10 + n);
  model.w.zero_grad();
  model.b.zero_grad();
  std::vector<Tensor> got = c({xc});
  got[0].backward();
  const Tensor gw = model.w.grad().clone(), gb = model.b.grad().clone();
  model.w.zero_grad();
  model.b.zero_grad();
  std::vector<Tensor> want = model({xe});
  want[0].backward();
  expect_same(got[0], want[0], "loss, " + at);
  expect_same(got[1], want[1], "per-example values, " + at);
  expect_same(xc.grad(), xe.grad(), "input gradient, " + at);
  expect_same(gw, model.w.grad(), "weight gradient, " + at);
  expect_same(gb, model.b.grad(), "bias gradient, " + at);
}

TEST(CompileDynamic, NewBatchSizesAreBuiltWithoutRunningTheFunction) {
  BatchModel model;
  int runs = 0;
  CompiledFunction c = compile(
      [&](const std::vector<Tensor>& in) {
        ++runs;
        return model(in);
      },
      batch_dynamic());
  for (int64_t n : {8, 12}) expect_as_eager(c, model, n);
  EXPECT_EQ(c.stats().traces, 2);
  EXPECT_EQ(c.stats().probes, 2);  // at 10, between the two, and 25, far out
  EXPECT_EQ(runs, 4);              // the two traces and the probes
  for (int64_t n : {5, 20, 3, 64, 12, 5}) expect_as_eager(c, model, n);
  EXPECT_EQ(runs, 4);
  EXPECT_EQ(c.stats().traces, 2);
  EXPECT_EQ(c.stats().instantiations, 4);  // 5, 20, 3 and 64; 12 and 5 again are cached
  EXPECT_EQ(c.stats().eager_calls, 0);
}

TEST(CompileDynamic, OneSizeSharedByTheInputsAndTheTargets) {
  Generator g(4);
  nn::Linear layer(6, 5, true, &g);
  auto f = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{cross_entropy(layer.forward(in[0]), in[1])};
  };
  CompiledFunction c = compile(f, batch_dynamic({{0, 0}, {1, -1}}));
  for (int64_t n : {6, 9, 4, 17}) {
    Generator d(static_cast<uint64_t>(n));
    const Tensor x = randn({n, 6}, DType::Float32, &d);
    const Tensor t = randint(0, 5, {n}, &d);
    layer.zero_grad();
    const Tensor got = c({x, t})[0];
    got.backward();
    const Tensor gw = layer.weight.grad().clone();
    layer.zero_grad();
    const Tensor want = f({x, t})[0];
    want.backward();
    expect_same(got, want, "loss at batch " + std::to_string(n));
    expect_same(gw, layer.weight.grad(), "weight gradient at batch " + std::to_string(n));
  }
  EXPECT_EQ(c.stats().traces, 2);
  EXPECT_EQ(c.stats().instantiations, 2);
}

TEST(CompileDynamic, AnIgnoredTargetTheFormulasDidNotSeeTakesTheBuiltGraph) {
  // cross_entropy's mean divides by the rows not ignored. With no row ignored in the first
  // sizes a count kept in the graph would fit 1 / s, wrong for a batch with ignored rows; the
  // backward computes the count from the target, so the built graphs are right for them.
  Generator g(6);
  const Tensor w = randn({4, 3}, DType::Float64, &g).requires_grad_(true);
  auto f = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{cross_entropy(matmul(in[0], w), in[1])};
  };
  CompiledFunction c = compile(f, batch_dynamic({{0, 0}, {1, 0}}));
  for (int64_t n : {5, 7, 6, 9}) {
    Generator d(static_cast<uint64_t>(n));
    const Tensor x = randn({n, 4}, DType::Float64, &d);
    std::vector<int64_t> targets = randint(0, 3, {n}, &d).to_vector<int64_t>();
    if (n == 6 || n == 9)  // after the two traces and the probe
      for (int64_t i = 0; i < n; i += 3) targets[static_cast<std::size_t>(i)] = -100;
    const Tensor t = tensor(targets);
    w.zero_grad();
    const Tensor got = c({x, t})[0];
    got.backward();
    const Tensor gw = w.grad().clone();
    w.zero_grad();
    const Tensor want = f({x, t})[0];
    want.backward();
    expect_same(got, want, "loss at batch " + std::to_string(n));
    expect_same(gw, w.grad(), "gradient at batch " + std::to_string(n));
  }
  EXPECT_EQ(c.stats().probes, 2);
  EXPECT_EQ(c.stats().traces, 2);  // 5 and 7; 6 and 9 are built
  EXPECT_EQ(c.stats().instantiations, 2);
}

// A small GPT's loss, compiled with the given dynamic dims and eager, on batches of b
// sequences of t tokens: the same loss and parameter gradients, bit for bit.
struct GptLoss {
  Generator init;
  nn::GPT model;
  std::function<std::vector<Tensor>(const std::vector<Tensor>&)> f;
  CompiledFunction c;
  GptLoss(uint64_t seed, std::vector<DynamicDim> dims)
      : init(seed),
        model(nn::GPTConfig{16, 12, 16, 2, 1, 0.0}, &init),
        f([this](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{model.loss(in[0], in[1])};
        }),
        c(compile(f, batch_dynamic(std::move(dims)))) {}

  void expect_as_eager(int64_t b, int64_t t) {
    Generator d(static_cast<uint64_t>(16 * b + t));
    const Tensor tokens = randint(0, 16, {b, t + 1}, &d);
    const Tensor in = tokens.slice(1, 0, t).contiguous();
    const Tensor target = tokens.slice(1, 1, t + 1).contiguous();
    const std::vector<Tensor> params = model.parameters();
    for (const Tensor& p : params) p.zero_grad();
    const Tensor got = c({in, target})[0];
    got.backward();
    std::vector<Tensor> grads;
    for (const Tensor& p : params) grads.push_back(p.grad().clone());
    for (const Tensor& p : params) p.zero_grad();
    const Tensor want = f({in, target})[0];
    want.backward();
    const std::string at = " at " + std::to_string(b) + "x" + std::to_string(t);
    expect_same(got, want, "loss" + at);
    for (std::size_t i = 0; i < params.size(); ++i)
      expect_same(grads[i], params[i].grad(), "gradient " + std::to_string(i) + at);
  }
};

TEST(CompileDynamic, AGptLossTakesAnyBatch) {
  GptLoss g(7, {{0, 0}, {1, 0}});
  for (int64_t b : {3, 5, 2, 9}) g.expect_as_eager(b, 8);
  EXPECT_EQ(g.c.stats().traces, 2);
  EXPECT_EQ(g.c.stats().probes, 2);
  EXPECT_EQ(g.c.stats().instantiations, 2);
}

TEST(CompileDynamic, AGptLossTakesAnySequenceLength) {
  // Positions are a view of the position table and the causal mask a buffer sliced to T, so
  // the graph's sizes are formulas in T; at T = context the model takes the whole mask and
  // table instead of slices, the same values.
  GptLoss g(8, {{0, 1}, {1, 1}});
  for (int64_t t : {5, 7, 3, 9, 12}) g.expect_as_eager(2, t);
  EXPECT_EQ(g.c.stats().traces, 2);
  EXPECT_EQ(g.c.stats().instantiations, 3);
}

// A batch and a sequence length, two symbols: B T appears in the loss's reshape and its mean's
// scale 1 / (B T), products the formulas hold. A batch of 1 is not dynamic: its calls form a
// family of their own, in T alone.
TEST(CompileDynamic, AGptLossTakesAnyBatchAndLength) {
  GptLoss g(9, {{0, 0, 0}, {1, 0, 0}, {0, 1, 1}, {1, 1, 1}});
  for (const auto& [b, t] : std::vector<std::pair<int64_t, int64_t>>{
           {3, 5}, {4, 7}, {2, 9}, {5, 3}, {6, 12}, {1, 4}, {1, 6}, {1, 8}})
    g.expect_as_eager(b, t);
  EXPECT_EQ(g.c.stats().traces, 4);  // 3x5 and 4x7; 1x4 and 1x6
  // 4x5 and 3x7 (the box's other corners), 5x6, 9x15 (past the context of 12: refused) and 7x10;
  // then 5, 13 (refused) and 9 for T alone.
  EXPECT_EQ(g.c.stats().probes, 5 + 3);
  EXPECT_EQ(g.c.stats().instantiations, 4);  // 2x9, 5x3, 6x12, 1x8
}

TEST(CompileDynamic, ALengthAtItsLimitIsFittedFromBelow) {
  // Calls at the longest length the function takes (12) change only the batch; it refuses 13,
  // so the length's formulas come from 11 and 12, and the near check from 10.
  auto f = [](const std::vector<Tensor>& in) {
    if (in[0].size(1) > 12) throw Error(ErrorKind::Shape, "f", "longer than 12");
    return std::vector<Tensor>{(in[0] * in[0]).sum({1}) * 0.5};
  };
  CompiledFunction c = compile(f, batch_dynamic({{0, 0, 0}, {0, 1, 1}}));
  for (const auto& [b, t] : std::vector<std::pair<int64_t, int64_t>>{{3, 12}, {5, 12}, {4, 9}}) {
    const Tensor x = randn({b, t});
    expect_same(c({x})[0], f({x})[0], "at " + std::to_string(b) + "x" + std::to_string(t));
  }
  EXPECT_EQ(c.stats().traces, 2);
  EXPECT_EQ(c.stats().instantiations, 1);
}

TEST(CompileDynamic, BuiltGraphsComposeWithJvpAndVmap) {
  auto f = [](const Tensor& x) { return (tanh(x) * x).sum({1}) / static_cast<double>(x.size(0)); };
  CompiledFunction c = compile(f, batch_dynamic());
  for (int64_t n : {4, 6}) c(randn({n, 3}, DType::Float64));
  for (int64_t n : {5, 9}) {
    const std::string at = "size " + std::to_string(n);
    const Tensor x = randn({n, 3}, DType::Float64), t = randn({n, 3}, DType::Float64);
    auto want = jvp(f, x, t);
    auto got = jvp([&](const Tensor& v) { return c(v); }, x, t);
    expect_same(got.outputs, want.outputs, "jvp value, " + at);
    expect_same(got.tangents, want.tangents, "jvp tangent, " + at);
    const Tensor xs = randn({3, n, 3}, DType::Float64);  // vmap over a leading dim of 3
    expect_same(vmap([&](const Tensor& v) { return c(v); })(xs), vmap(f)(xs), "vmap, " + at);
  }
  EXPECT_GE(c.stats().instantiations, 2);
}

TEST(CompileDynamic, RandomDrawsOfTheBatchsShapeReplayAsEager) {
  auto f = [](Generator* g) {
    return [g](const Tensor& x) { return dropout(x, 0.5, true, g) * 3.0; };
  };
  Generator gc(11), ge(11);
  CompiledFunction c = compile(f(&gc), batch_dynamic());
  for (int64_t n : {4, 6, 10, 3}) {
    const Tensor x = randn({n, 5});
    expect_same(c(x), f(&ge)(x), "batch " + std::to_string(n));
  }
  EXPECT_EQ(c.stats().instantiations, 2);
}

TEST(CompileDynamic, FactoriesOfTheSizeAreMadeAgainAtEachSize) {
  // arange(n), linspace, eye, zeros and full of the batch's shape are constants of the trace;
  // their recipes (the factory and its arguments) make them at every size.
  auto f = [](const Tensor& x) {
    const int64_t n = x.size(0);
    return x * arange(n, DType::Float32).unsqueeze(1) + zeros({n, 1}) +
           full({1, 3}, 0.25) * ones({n, 3}) + linspace(0.0, 1.0, n).unsqueeze(1) +
           matmul(eye(n), x);
  };
  CompiledFunction c = compile(f, batch_dynamic());
  for (int64_t n : {4, 6, 9, 2, 17}) {
    const Tensor x = randn({n, 3});
    expect_same(c(x), f(x), "size " + std::to_string(n));
  }
  EXPECT_EQ(c.stats().traces, 2);
  EXPECT_EQ(c.stats().instantiations, 3);
}

TEST(CompileDynamic, AGraphThatDependsOnTheSizeOtherwiseTracesEverySize) {
  // A tensor from C++ data of the size's length: a constant no recipe makes again.
  auto f = [](const Tensor& x) {
    return x * tensor(std::vector<float>(static_cast<std::size_t>(x.size(0)), 1.5f));
  };
  CompiledFunction c = compile(f, batch_dynamic());
  for (int64_t n : {4, 6, 9}) {
    const Tensor x = randn({n});
    expect_same(c(x), f(x), "size " + std::to_string(n));
  }
  EXPECT_EQ(c.stats().traces, 3);
  EXPECT_EQ(c.stats().probes, 2);
  EXPECT_EQ(c.stats().instantiations, 0);

  // The first size's constant has no recipe, the others' have one: refused, whatever the order.
  auto h = [](const Tensor& x) {
    const int64_t n = x.size(0);
    return x * (n == 9 ? tensor(std::vector<float>(9, 0.5f)) : full({n}, 0.5));
  };
  CompiledFunction ch = compile(h, batch_dynamic());
  for (int64_t n : {9, 7, 5}) {
    const Tensor x = randn({n});
    expect_same(ch(x), h(x), "size " + std::to_string(n));
  }
  EXPECT_EQ(ch.stats().instantiations, 0);

  // Another op at another size: the branch shows between the traced sizes.
  auto g = [](const Tensor& x) { return x.size(0) > 5 ? exp(x) : sin(x); };
  CompiledFunction cg = compile(g, batch_dynamic());
  for (int64_t n : {4, 6, 9, 3}) {
    const Tensor x = randn({n});
    expect_same(cg(x), g(x), "size " + std::to_string(n));
  }
  EXPECT_EQ(cg.stats().instantiations, 0);
}

TEST(CompileDynamic, APiecewiseSizeIsCaughtByTheFarCheck) {
  // chunk(3) cuts pieces of ceil(n / 3) rows: at 7, 8 and 9 the pieces are 3, 3 and n - 6, a
  // formula those sizes fit; at 10 they are 4, 4 and 2. The check at 2 * 8 + 1 = 17 sees it.
  auto f = [](const Tensor& x) {
    const std::vector<Tensor> c = x.chunk(3, 0);
    return cat({c[0] * 1.0, c[1] * 2.0, c[2] * 3.0}, 0);
  };
  CompiledFunction c = compile(f, batch_dynamic());
  for (int64_t n : {7, 8, 10, 12}) {
    const Tensor x = randn({n, 2});
    expect_same(c(x), f(x), "size " + std::to_string(n));
  }
  EXPECT_EQ(c.stats().instantiations, 0);
  EXPECT_EQ(c.stats().traces, 4);
}

TEST(CompileDynamic, SizesTheFormulasCannotTakeAreTraced) {
  // narrow(x, 0, 2, n - 4): fitted from 8 and 10, it builds 6 without a trace; at 3 the length
  // formula gives -1, so the graph is not built there but traced, and the function's own error
  // (as eager code raises it) reaches the caller.
  auto f = [](const Tensor& x) { return x.narrow(0, 2, x.size(0) - 4) * 2.0; };
  CompiledFunction c = compile(f, batch_dynamic());
  for (int64_t n : {8, 10, 6}) {
    const Tensor x = randn({n, 2});
    expect_same(c(x), f(x), "size " + std::to_string(n));
  }
  EXPECT_EQ(c.stats().instantiations, 1);
  const Tensor small = randn({3, 2});
  auto message = [&](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string eager = message([&] { f(small); });
  EXPECT_NE(eager.find("narrow"), std::string::npos) << eager;
  EXPECT_EQ(message([&] { c(small); }), eager);
  EXPECT_EQ(c.stats().instantiations, 1);
}

TEST(CompileDynamic, SizesZeroAndOneAreTracedOnTheirOwn) {
  CompiledFunction c = compile([](const Tensor& x) { return (x * 2.0).sum({0}); }, batch_dynamic());
  for (int64_t n : {4, 6, 1, 0, 7}) {
    const Tensor x = randn({n, 3});
    expect_same(c(x), (x * 2.0).sum({0}), "size " + std::to_string(n));
  }
  EXPECT_EQ(c.stats().traces, 4);  // 4, 6, 1 and 0
  EXPECT_EQ(c.stats().instantiations, 1);
}

TEST(CompileDynamic, NewSizesNeverRunEagerlyForTheCacheLimit) {
  CompileOptions o = batch_dynamic();
  o.cache_limit = 2;  // the two traced sizes fill it
  CompiledFunction c = compile([](const Tensor& x) { return exp(x).mean({0}); }, o);
  for (int64_t n = 2; n < 12; ++n) {
    const Tensor x = randn({n, 2});
    expect_same(c(x), exp(x).mean({0}), "size " + std::to_string(n));
  }
  EXPECT_EQ(c.stats().eager_calls, 0);
  EXPECT_EQ(c.stats().cache_limit_hits, 0);
  EXPECT_EQ(c.stats().traces, 2);
  EXPECT_EQ(c.stats().instantiations, 8);
}

TEST(CompileDynamic, ANonContiguousInputIsTracedAtEachSize) {
  CompiledFunction c =
      compile([](const Tensor& x) { return x.reshape({-1}) * 2.0; }, batch_dynamic());
  for (int64_t n : {3, 5, 7}) {
    const Tensor x = randn({4, n}).t();  // [n, 4], transposed
    expect_same(c(x), x.reshape({-1}) * 2.0, "size " + std::to_string(n));
  }
  EXPECT_EQ(c.stats().traces, 3);
  EXPECT_EQ(c.stats().instantiations, 0);
}

TEST(CompileDynamic, DimsThatDoNotExistAreErrors) {
  CompiledFunction c = compile([](const Tensor& x) { return x * 2.0; }, batch_dynamic({{1, 0}}));
  expect_error([&] { c(randn({3})); }, ErrorKind::Value, {"compile", "argument 1"});
  CompiledFunction d = compile([](const Tensor& x) { return x * 2.0; }, batch_dynamic({{0, 2}}));
  expect_error([&] { d(randn({3, 2})); }, ErrorKind::Value, {"compile", "dim 2", "[3, 2]"});
  CompiledFunction e = compile([](const Tensor& x) { return x * 2.0; }, batch_dynamic({{0, 0, 3}}));
  expect_error([&] { e(randn({3, 2})); }, ErrorKind::Value, {"compile", "symbol 3"});
}

TEST(CompileDynamic, DimsOfOneSymbolWithDifferentSizesAreTracedSizeBySize) {
  auto f = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0].sum() + in[1].sum()};
  };
  CompiledFunction c = compile(f, batch_dynamic({{0, 0}, {1, 0}}));
  for (int64_t n : {3, 5, 7}) {
    const std::vector<Tensor> in{randn({n}), randn({n + 1})};
    expect_same(c(in)[0], f(in)[0], "size " + std::to_string(n));
  }
  EXPECT_EQ(c.stats().traces, 3);
  EXPECT_EQ(c.stats().probes, 0);
}

}  // namespace
