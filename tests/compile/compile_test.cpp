// compile: tracing once and replaying, the cache and its keys, gradients through the compiled
// backward (.grad, hooks, retain_graph, create_graph), captured tensors, graph breaks, random
// draws, the passes, and composition with the transforms. Eager code is the oracle throughout:
// with no pass that reassociates arithmetic, compiled results equal eager ones bit for bit.
#include <gtest/gtest.h>

#include <functional>

#include "adjoint/adjoint.h"
#include "support/expect.h"

namespace {

using namespace adjoint;
using adjoint::testing::contains;
using adjoint::testing::expect_error;
using adjoint::testing::expect_same;

Tensor leaf(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, DType::Float64, &g).requires_grad_(true);
}

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

TEST(Compile, TracesOnceAndReplaysWithoutRunningTheFunction) {
  int runs = 0;
  auto f = [&](const Tensor& x) {
    ++runs;
    return tanh(x * 0.5 + 1.0) * x;
  };
  CompiledFunction c = compile(f);
  for (int i = 0; i < 4; ++i) {
    Tensor x = randn({7});
    Tensor y = c(x);
    const int before = runs;
    expect_same(y, f(x));
    runs = before;
  }
  EXPECT_EQ(runs, 1);  // the trace
  EXPECT_EQ(c.stats().traces, 1);
  EXPECT_EQ(c.stats().replays, 4);
}

TEST(Compile, ANewSignatureTracesAgain) {
  CompiledFunction c = compile([](const Tensor& x) { return exp(x).sum(); });
  c(randn({3}));
  c(randn({3}));
  EXPECT_EQ(c.stats().traces, 1);
  c(randn({4}));  // shape
  EXPECT_EQ(c.stats().traces, 2);
  c(randn({3}, DType::Float64));  // dtype
  EXPECT_EQ(c.stats().traces, 3);
  c(randn({3}).requires_grad_(true));  // requires grad
  EXPECT_EQ(c.stats().traces, 4);
  {
    NoGradGuard no_grad;  // grad mode
    c(randn({3}).requires_grad_(true));
  }
  EXPECT_EQ(c.stats().traces, 5);
  c(randn({3, 2}).select(1, 0));  // layout (not contiguous)
  EXPECT_EQ(c.stats().traces, 6);
  c(randn({4}));
  EXPECT_EQ(c.stats().traces, 6);
}

TEST(Compile, TheCacheLimitRunsNewSignaturesEagerly) {
  int runs = 0;
  CompileOptions o;
  o.cache_limit = 2;
  o.warn = false;
  CompiledFunction c = compile(
      [&](const Tensor& x) {
        ++runs;
        return x * 2.0;
      },
      o);
  c(randn({1}));
  c(randn({2}));
  Tensor x = randn({3});
  expect_same(c(x), x * 2.0);
  EXPECT_EQ(c.stats().traces, 2);
  EXPECT_EQ(c.stats().cache_limit_hits, 1);
  EXPECT_EQ(c.stats().eager_calls, 1);
  EXPECT_EQ(runs, 3);
}

TEST(Compile, StaticArgumentsArePartOfTheKey) {
  CompiledFunction c = compile([](const std::vector<Tensor>& in, const StaticArgs& s) {
    return std::vector<Tensor>{pow(in[0], std::get<double>(s.at(0)))};
  });
  Tensor x = rand({5}) + 0.5;
  expect_same(c({x}, {2.0})[0], pow(x, 2.0));
  expect_same(c({x}, {3.0})[0], pow(x, 3.0));
  expect_same(c({x}, {2.0})[0], pow(x, 2.0));
  EXPECT_EQ(c.stats().traces, 2);
}

// A small model: a captured weight and bias, an input that requires grad.
struct Model {
  Tensor w = leaf({4, 3}, 1), b = leaf({4}, 2);
  std::vector<Tensor> operator()(const std::vector<Tensor>& in) const {
    return {(gelu(linear(in[0], w, b)) * in[0].sum({1}, true)).pow(2.0).mean()};
  }
};

TEST(Compile, GradientsAndGradAccumulationMatchEager) {
  Model m;
  CompiledFunction c = compile([&](const std::vector<Tensor>& in) { return m(in); });
  for (int step = 0; step < 3; ++step) {
    Tensor x = leaf({5, 3}, 10 + step), xe = x.detach().requires_grad_(true);
    c(std::vector<Tensor>{x})[0].backward();
    const Tensor gw = m.w.grad().clone(), gb = m.b.grad().clone(), gx = x.grad().clone();
    m.w.zero_grad();
    m.b.zero_grad();
    m(std::vector<Tensor>{xe})[0].backward();
    expect_same(gx, xe.grad());
    expect_same(gw, m.w.grad());
    expect_same(gb, m.b.grad());
    // .grad accumulates across backward calls, as eager.
    c(std::vector<Tensor>{x.detach()})[0].backward();
    m(std::vector<Tensor>{xe.detach()})[0].backward();
    m.w.zero_grad();
    m.b.zero_grad();
  }
  EXPECT_EQ(c.stats().traces, 2);  // x requires grad, then x.detach() does not
}

TEST(Compile, HooksOnInputsAndRetainGraphKeepTheirMeaning) {
  Model m;
  CompiledFunction c = compile([&](const std::vector<Tensor>& in) { return m(in); });
  Tensor x = leaf({2, 3}, 3);
  Tensor seen;
  int calls = 0;
  x.register_hook([&](const Tensor& g) {
    ++calls;
    seen = g.clone();
    return g;
  });
  Tensor y = c(std::vector<Tensor>{x})[0];
  EXPECT_EQ(y.grad_fn()->name(), "CompiledFunctionBackward");
  y.backward({}, /*retain_graph=*/true);
  EXPECT_EQ(calls, 1);
  expect_same(seen, x.grad());
  y.backward();  // retained: accumulates a second time
  const Tensor twice = x.grad().clone();
  x.zero_grad();
  Tensor xe = x.detach().requires_grad_(true);
  m(std::vector<Tensor>{xe})[0].backward();
  expect_same(twice, xe.grad() * 2.0);
  expect_error([&] { y.backward(); }, ErrorKind::Autograd, {"second time"});
}

TEST(Compile, CreateGraphGivesSecondDerivatives) {
  auto f = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{(sin(in[0]) * in[1]).pow(3.0).sum()};
  };
  CompiledFunction c = compile(f);
  Tensor x = leaf({4}, 4), w = leaf({4}, 5);
  Tensor xe = x.detach().requires_grad_(true), we = w.detach().requires_grad_(true);
  auto gc = autograd::grad({c(std::vector<Tensor>{x, w})[0]}, {x, w}, {}, true, true);
  auto ge = autograd::grad({f({xe, we})[0]}, {xe, we}, {}, true, true);
  expect_same(gc[0], ge[0]);
  auto hc = autograd::grad({(gc[0] * gc[1]).sum()}, {x, w});
  auto he = autograd::grad({(ge[0] * ge[1]).sum()}, {xe, we});
  expect_same(hc[0], he[0]);
  expect_same(hc[1], he[1]);
}

TEST(Compile, CapturedTensorsAreReadAtEveryCall) {
  Tensor w = randn({3});
  CompiledFunction c = compile([&](const Tensor& x) { return x * w; });
  Tensor x = randn({3});
  expect_same(c(x), x * w);
  {
    NoGradGuard no_grad;
    w.sub_(1.0);  // an optimizer's update, in place
  }
  expect_same(c(x), x * w);
  EXPECT_EQ(c.stats().traces, 1);
}

TEST(Compile, ACapturedTensorThatStartsRequiringGradTracesAgain) {
  Tensor w = randn({3}, DType::Float64);
  CompiledFunction c = compile([&](const Tensor& x) { return (x * w).sum(); });
  Tensor x = leaf({3}, 6);
  c(x).backward();
  EXPECT_FALSE(w.grad().defined());
  w.requires_grad_(true);
  c(x).backward();  // the guard on w fails: traced again, now with w's gradient
  EXPECT_EQ(c.stats().guard_failures, 1);
  expect_same(w.grad(), x.detach());
}

TEST(Compile, ReadingValuesIsAGraphBreak) {
  int runs = 0;
  auto f = [&](const Tensor& x) {
    ++runs;
    return x.sum().item<double>() > 0 ? x * 2.0 : x * 3.0;
  };
  CompileOptions o;
  o.warn = false;
  CompiledFunction c = compile(f, o);
  Tensor pos = ones({3}), neg = -ones({3});
  expect_same(c(pos), pos * 2.0);
  expect_same(c(neg), neg * 3.0);  // right, because it ran eagerly
  EXPECT_EQ(c.stats().graph_breaks, 1);
  EXPECT_EQ(c.stats().eager_calls, 2);
  EXPECT_TRUE(contains(c.dump(), "item inside a compiled function"));

  o.on_graph_break = OnGraphBreak::Throw;
  CompiledFunction strict = compile(f, o);
  expect_error([&] { strict(pos); }, ErrorKind::NotImplemented,
               {"compile", "item inside a compiled function"});
}

// In-place writes are traced (Note [In-place ops under compile]): the trace writes nothing of
// the caller's, and each replay writes once. tests/compile/compile_inplace_test.cpp has the rest.
TEST(Compile, InPlaceWritesHappenOnceAtEachCall) {
  Tensor counter = zeros({1});
  CompiledFunction c = compile([&](const Tensor& x) {
    counter.add_(1.0);
    return x + 1.0;
  });
  c(ones({2}));
  EXPECT_EQ(counter.item<float>(), 1.0f);  // the trace wrote nothing, the replay once
  c(ones({2}));
  EXPECT_EQ(counter.item<float>(), 2.0f);
  EXPECT_EQ(c.stats().graph_breaks, 0);
  EXPECT_EQ(c.stats().traces, 1);

  CompiledFunction on_input = compile([](const Tensor& x) {
    Tensor y = x * 1.0;
    Tensor same = x;
    same.mul_(2.0);
    return y;
  });
  Tensor x = ones({2});
  expect_same(on_input(x), ones({2}));  // y was read before the write
  expect_same(x, full({2}, 2.0));       // doubled once
}

// A function that catches adjoint::Error and goes on (found by the ops fuzzer: its interpreter
// skips ops that throw) still breaks the trace: the graph would otherwise lack the write the
// function skipped while tracing but does when it runs eagerly.
TEST(Compile, AGraphBreakTheFunctionCatchesStillRunsEagerly) {
  CompileOptions o;
  o.warn = false;
  auto f = [](const Tensor& x) {
    Tensor y = log1p(x);
    Tensor column = y.narrow(1, 0, 1);
    try {
      column.clamp_(2.0, 2.0);  // in place on a traced value: a graph break while tracing
    } catch (const Error&) {
    }
    return std::vector<Tensor>{y, column};
  };
  CompiledFunction c = compile([&](const std::vector<Tensor>& in) { return f(in[0]); }, o);
  const Tensor x = full({4, 2}, 0.5);
  const std::vector<Tensor> want = f(x);
  for (int call = 0; call < 2; ++call) {
    const std::vector<Tensor> got = c({x});
    ASSERT_EQ(got.size(), 2u);
    expect_same(got[0], want[0]);
    expect_same(got[1], want[1]);
  }
  EXPECT_EQ(c.stats().graph_breaks, 1);
  EXPECT_EQ(c.stats().eager_calls, 2);
  EXPECT_TRUE(contains(c.dump(), "the function caught that error and went on"));
}

// requires_grad_ inside the function changes a flag the graph does not hold: a replay would
// leave the argument as the caller passed it, so the argument would get no gradient (found by
// the ops fuzzer's compile check). It is a graph break: every call runs eagerly and sets it.
TEST(Compile, RequiresGradInsideTheFunctionIsAGraphBreak) {
  CompileOptions o;
  o.warn = false;
  auto f = [](const std::vector<Tensor>& in) {
    Tensor x = in[0];
    x.requires_grad_(true);
    return std::vector<Tensor>{(x * x).sum()};
  };
  CompiledFunction c = compile(f, o);
  for (int call = 0; call < 2; ++call) {
    const Tensor x = full({3}, 2.0);  // a fresh argument that does not require grad
    const Tensor y = c({x})[0];
    ASSERT_TRUE(x.requires_grad());
    y.backward();
    expect_same(x.grad(), full({3}, 4.0));
  }
  EXPECT_EQ(c.stats().graph_breaks, 1);
  EXPECT_EQ(c.stats().eager_calls, 2);
  EXPECT_TRUE(contains(c.dump(), "requires_grad_ inside a compiled function"));
  // Setting it to what it is already changes nothing, and traces.
  CompiledFunction same = compile([](const std::vector<Tensor>& in) {
    Tensor x = in[0];
    x.requires_grad_(x.requires_grad());
    return std::vector<Tensor>{x * 2.0};
  });
  same({full({3}, 1.0)});
  same({full({3}, 1.0)});
  EXPECT_EQ(same.stats().graph_breaks, 0);
  EXPECT_EQ(same.stats().traces, 1);
  EXPECT_EQ(same.stats().eager_calls, 0);
}

// A traced view replays on whatever layout its input has then, which need not be the traced
// one: the engine hands the backward the cotangent `y.sum()` makes, an expanded tensor whose
// elements are all one element, where the trace had a contiguous one. View ops that took the
// traced layout for granted read past that element: amin(x, {1})'s gradient was wrong at the
// minima (the view of the cotangent to [4, 1]; found by a fusion test), and so was select's
// (its backward unsqueezes the cotangent). (An argument's layout is part of the signature.)
TEST(Compile, ATracedViewReplaysOnAnExpandedCotangent) {
  Generator gen(12);
  const Tensor x = randn({4, 300}, DType::Float32, &gen).requires_grad_(true);
  const std::vector<std::function<Tensor(const Tensor&)>> fns = {
      [](const Tensor& v) { return v.amin({1}); }, [](const Tensor& v) { return v.select(0, 1); },
      [](const Tensor& v) {
        return v.unsqueeze(0).reshape({2, 600});
      }};
  for (const auto& f : fns) {
    CompiledFunction c = compile(f);
    for (int call = 0; call < 2; ++call) {  // traced, then replayed
      const Tensor gc = autograd::grad({c(x).sum()}, {x})[0];
      const Tensor xe = x.detach().requires_grad_(true);
      expect_same(gc, autograd::grad({f(xe).sum()}, {xe})[0]);
    }
    EXPECT_EQ(c.stats().traces, 1);
  }
  // A cotangent the caller gave transposed: no view of it has the input's shape, so the
  // replayed view reads a contiguous copy.
  auto regroup = [](const Tensor& v) { return v.unsqueeze(0).reshape({20, 60}); };
  CompiledFunction c = compile(regroup);
  const Tensor g = randn({60, 20}, DType::Float32, &gen).t();
  for (int call = 0; call < 2; ++call) {
    const Tensor gc = autograd::grad({c(x)}, {x}, {g})[0];
    const Tensor xe = x.detach().requires_grad_(true);
    expect_same(gc, autograd::grad({regroup(xe)}, {xe}, {g})[0]);
  }
}

// A result the function detached from its argument (found by the ops fuzzer's compile check):
// the graph holds it as the argument's value, which requires grad, and the replay handed back
// the caller's own tensor, so a backward through it reached the argument. It comes back
// detached, as eager code returns it; the argument itself returned stays the caller's tensor.
TEST(Compile, AResultDetachedFromAnArgumentStaysDetached) {
  auto f = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{in[0].detach(), in[0], in[0] * 3.0};
  };
  CompiledFunction c = compile(f);
  const Tensor x = ones({3}).requires_grad_();
  for (int call = 0; call < 2; ++call) {
    const std::vector<Tensor> outs = c({x});
    EXPECT_FALSE(outs[0].requires_grad());
    EXPECT_FALSE(outs[0].is_same(x));
    expect_same(outs[0], x.detach());
    EXPECT_TRUE(outs[1].requires_grad());
    x.zero_grad();
    (outs[1] * 2.0 + outs[2]).sum().backward();
    expect_same(x.grad(), full({3}, 5.0));  // 2 through the argument, 3 through the product
  }
}

TEST(Compile, HooksInsideTheFunctionAreGraphBreaksAndBackwardIsTraced) {
  CompileOptions o;
  o.on_graph_break = OnGraphBreak::Throw;
  Tensor x = randn({3}).requires_grad_(true);
  CompiledFunction hook = compile(
      [](const Tensor& v) {
        Tensor y = v * 2.0;
        y.register_hook([](const Tensor& g) { return g; });
        return y;
      },
      o);
  expect_error([&] { hook(x); }, ErrorKind::NotImplemented, {"register_hook"});
  CompiledFunction retain = compile(
      [](const Tensor& v) {
        Tensor y = v * 2.0;
        y.retain_grad();
        return y;
      },
      o);
  expect_error([&] { retain(x); }, ErrorKind::NotImplemented, {"retain_grad"});
  EXPECT_FALSE(x.grad().defined());  // the refused traces' backward ran on aliases, if at all
  // backward() itself is traced (tests/compile/compile_training_step_test.cpp): x.grad is
  // written at each call, and the result comes back detached.
  CompiledFunction inner = compile(
      [](const Tensor& v) {
        (v * v).sum().backward();
        return v * 1.0;
      },
      o);
  for (int i = 0; i < 2; ++i) {
    x.zero_grad();
    const Tensor y = inner(x);
    EXPECT_FALSE(y.requires_grad());
    expect_same(x.grad(), x.detach() * 2.0);
  }
  EXPECT_EQ(inner.stats().replays, 2);
}

TEST(Compile, RandomDrawsMatchEager) {
  auto f = [](Generator* g) {
    return [g](const Tensor& x) {
      return dropout(x, 0.5, true, g) + randn({x.size(0)}, DType::Float32, g);
    };
  };
  Generator gc(7), ge(7);
  CompiledFunction c = compile(f(&gc));
  auto eager = f(&ge);
  Tensor x = ones({64});
  for (int i = 0; i < 3; ++i) expect_same(c(x), eager(x));
  // A generator made and seeded inside the function draws the same at every call.
  auto local = [](const Tensor& x) {
    Generator g(3);
    return dropout(x, 0.5, true, &g);
  };
  CompiledFunction cl = compile(local);
  expect_same(cl(x), local(x));
  expect_same(cl(x * 2.0), local(x * 2.0));
  EXPECT_EQ(cl.stats().traces, 1);
}

TEST(Compile, CommonSubexpressionsAndDeadCodeAreEliminated) {
  auto f = [](const Tensor& x) {
    Tensor unused = cos(x);
    (void)unused;
    return exp(x) * exp(x) + sin(x);
  };
  CompileOptions unfused;  // so that the dump names each op
  unfused.fuse_pointwise = false;
  CompiledFunction c = compile(f, unfused);
  Tensor x = randn({5});
  expect_same(c(x), f(x));
  EXPECT_EQ(count(c.dump(false), "exp("), 2);
  EXPECT_EQ(count(c.dump(false), "cos("), 1);
  EXPECT_EQ(count(c.dump(), "exp("), 1);
  EXPECT_EQ(count(c.dump(), "cos("), 0);
  CompileOptions off = unfused;
  off.eliminate_common_subexpressions = false;
  off.eliminate_dead_code = false;
  CompiledFunction plain = compile(f, off);
  expect_same(plain(x), f(x));
  EXPECT_EQ(count(plain.dump(), "exp("), 2);
  EXPECT_EQ(count(plain.dump(), "cos("), 1);
  EXPECT_TRUE(contains(c.to_dot(), "digraph"));
}

TEST(Compile, ACountOfIgnoredRowsThatChangesNeedsNoNewTrace) {
  // cross_entropy's mean divides by the rows not ignored, a count the backward computes from
  // the target: a replay whose count differs from the trace's is right without a new trace.
  auto f = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{cross_entropy(in[0], in[1], Reduction::Mean, -1)};
  };
  CompiledFunction c = compile(f);
  Tensor logits = leaf({4, 5}, 9);
  for (const std::vector<int64_t>& t :
       {std::vector<int64_t>{1, 2, 3, 4}, {1, -1, 3, 4}, {-1, -1, 0, 2}, {0, 1, 2, 3}}) {
    const Tensor target = tensor(t, std::nullopt, DType::Int64);
    Tensor xc = logits.detach().requires_grad_(true), xe = logits.detach().requires_grad_(true);
    Tensor lc = c(std::vector<Tensor>{xc, target})[0], le = f({xe, target})[0];
    expect_same(lc, le);
    lc.backward();
    le.backward();
    expect_same(xc.grad(), xe.grad());
  }
  EXPECT_EQ(c.stats().guard_failures, 0);  // 4, 3, 2, then 4 rows again
  EXPECT_EQ(c.stats().traces, 1);
}

TEST(Compile, DetachStopsGradientsInTheCompiledBackward) {
  auto f = [](const Tensor& x) { return (x * x.detach()).sum(); };
  CompiledFunction c = compile(f);
  Tensor x = leaf({4}, 8);
  c(x).backward();
  expect_same(x.grad(), x.detach());
}

TEST(Compile, ComposesWithVmapInBothOrders) {
  auto f = [](const Tensor& x) { return tanh(x).sum() * x; };
  CompiledFunction c = compile(f);
  Tensor xs = randn({4, 3}, DType::Float64);
  Tensor got = vmap([&](const Tensor& x) { return c(x); })(xs);
  for (int64_t k = 0; k < 4; ++k) expect_same(got.select(0, k), f(xs.select(0, k)));
  EXPECT_EQ(c.stats().dispatched, 1);

  CompiledFunction cv = compile([&](const Tensor& x) { return vmap(f)(x); });
  expect_same(cv(xs), vmap(f)(xs));
  expect_same(cv(xs * 2.0), vmap(f)(xs * 2.0));
  EXPECT_EQ(cv.stats().traces, 1);
}

TEST(Compile, ComposesWithGradAndJvp) {
  auto f = [](const Tensor& x) { return (sin(x) * x).sum(); };
  CompiledFunction c = compile(f);
  Tensor x = randn({5}, DType::Float64);
  expect_same(grad([&](const Tensor& y) { return c(y); })(x), grad(f)(x));
  CompiledFunction cg = compile([&](const Tensor& y) { return grad(f)(y); });
  expect_same(cg(x), grad(f)(x));
  expect_same(cg(x * 3.0), grad(f)(x * 3.0));
  EXPECT_EQ(cg.stats().graph_breaks, 0);
  Tensor t = ones({5}, DType::Float64);
  auto jc = jvp([&](const Tensor& y) { return c(y); }, x, t);
  auto je = jvp(f, x, t);
  expect_same(jc.outputs, je.outputs);
  expect_same(jc.tangents, je.tangents);
}

TEST(Compile, CallingACompiledFunctionInsideATraceInlinesIt) {
  CompiledFunction inner = compile([](const Tensor& x) { return exp(x); });
  CompiledFunction outer = compile([&](const Tensor& x) { return inner(x) + 1.0; });
  // (the dump shows the fused group's members by name)
  Tensor x = randn({3});
  expect_same(outer(x), exp(x) + 1.0);
  EXPECT_TRUE(contains(outer.dump(), "fused[exp, add]"));
  EXPECT_EQ(inner.stats().traces, 0);
}

}  // namespace
