// Ops without derivatives (comparisons, logical ops, argmax/argmin), random draws, factories
// and in-place ops pass the dispatch stack as every op does (Note [Ops without derivatives] in
// src/ops/no_derivative.h, Note [Random draws in the stack] in src/ops/random.cpp, Note
// [Factories in the stack] in src/ops/factories.cpp, Note [In-place ops in the stack] in
// src/ops/inplace.cpp): observers see them, their results carry
// no history, vmap batches them in its layer and compile records them as graph nodes (draws)
// or constants (factories), in-place ops as writes.
// The oracles are eager code: loops of draws from the same seed, the unbatched op per example.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "adjoint/adjoint.h"
#include "adjoint/optim.h"
#include "autograd/memory_hooks.h"
#include "optim/adam_fused.h"

namespace adjoint {
namespace {

struct OpNames : detail::OpObserver {
  std::set<std::string> seen;
  void before_forward_op(const char* op) override { seen.insert(op); }
};

double max_diff(const Tensor& a, const Tensor& b) {
  return abs(a.to(DType::Float64) - b.to(DType::Float64)).max().item<double>();
}

TEST(TotalStack, ObserversSeeComparisonsArgReductionsAndDraws) {
  const Tensor x = randn({3, 4});
  const Tensor y = randn({3, 4});
  OpNames names;
  detail::set_op_observer(&names);
  Generator gen(3);
  (void)gt(x, y);
  (void)le(x, 0.5);
  (void)logical_not(eq(x, y));
  (void)logical_or(ne(x, y), ge(x, y));
  (void)argmax(x);
  (void)argmin(x, 1);
  (void)rand({2}, DType::Float32, &gen);
  (void)randn({2}, DType::Float32, &gen);
  (void)randint(0, 4, {2}, &gen);
  detail::set_op_observer(nullptr);
  for (const char* op : {"gt", "le", "eq", "logical_not", "ne", "ge", "logical_or", "argmax",
                         "argmin", "rand", "randn", "randint"})
    EXPECT_TRUE(names.seen.count(op)) << op << " did not pass the Observe layer";
}

TEST(TotalStack, ResultsWithoutDerivativesHaveNoHistoryOrTangent) {
  const Tensor x = randn({5}, DType::Float64).requires_grad_(true);
  for (const Tensor& r : {gt(x, 0.0), lt(x, x * 2.0), argmax(x), argmin(x, 0)}) {
    EXPECT_FALSE(r.requires_grad());
    EXPECT_EQ(r.grad_fn(), nullptr);
  }
  // Under forward mode the bool result has no tangent, and a value chosen with it does.
  const Tensor t = ones({5}, DType::Float64);
  const auto r = jvp([](const Tensor& v) { return where(gt(v, 0.0), v * 3.0, v); }, x.detach(), t);
  const Tensor& ty = r.tangents;
  const Tensor expected = where(gt(x.detach(), 0.0), full({5}, 3.0, DType::Float64), t);
  EXPECT_EQ(max_diff(ty, expected), 0);
}

TEST(TotalStack, VmapDrawsOnePerExampleLikeOneDrawOfTheBatch) {
  VmapOptions different;
  different.randomness = Randomness::Different;
  Generator a(17), b(17);
  const Tensor batched = vmap([&](const Tensor& x) { return x + randn({3}, DType::Float64, &a); },
                              {0}, {0}, different)(zeros({4, 3}, DType::Float64));
  // The physical draw is of the batch's shape, batch in front: the same as one eager draw.
  EXPECT_EQ(max_diff(batched, randn({4, 3}, DType::Float64, &b)), 0);

  VmapOptions same;
  same.randomness = Randomness::Same;
  Generator c(5), d(5);
  const Tensor shared = vmap([&](const Tensor& x) { return x + rand({3}, DType::Float64, &c); },
                             {0}, {0}, same)(zeros({2, 3}, DType::Float64));
  const Tensor one = rand({3}, DType::Float64, &d);
  EXPECT_EQ(max_diff(shared, stack({one, one}, 0)), 0);

  // The default refuses, naming the draw.
  try {
    vmap([](const Tensor& x) { return x + randint(0, 3, {3}).to(x.dtype()); })(zeros({2, 3}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("randint"), std::string::npos) << e.what();
  }
}

TEST(TotalStack, VmapOfComparisonsAndArgmaxMatchesTheLoop) {
  const Tensor xs = randn({4, 3, 5}, DType::Float64);
  auto f = [](const Tensor& x) {
    const Tensor cmp = logical_and(gt(x, 0.0), le(x, x.mean()));
    return where(cmp, x, zeros({}, x.dtype())) + argmax(x, 1).to(x.dtype()).unsqueeze(1) +
           argmin(x).to(x.dtype());
  };
  const Tensor batched = vmap(f)(xs);
  std::vector<Tensor> loop;
  for (int64_t i = 0; i < 4; ++i) loop.push_back(f(xs.select(0, i)));
  EXPECT_EQ(max_diff(batched, stack(loop, 0)), 0);
}

TEST(TotalStack, CompileRecordsThemAsNodesAndReplaysDrawsAsEagerCode) {
  auto f = [](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    const Tensor noise = randn(x.shape(), x.dtype());
    const Tensor keep = gt(x + noise, 0.0);
    return std::vector<Tensor>{where(keep, x, noise) * argmax(x, -1, true).to(x.dtype())};
  };
  const Tensor x = randn({3, 6});
  auto compiled = compile(f);
  for (int call = 0; call < 3; ++call) {  // the trace, then replays
    manual_seed(100 + call);
    const Tensor expected = f({x})[0];
    manual_seed(100 + call);
    const Tensor got = compiled({x})[0];
    EXPECT_EQ(max_diff(got, expected), 0) << "call " << call;
  }
  const std::string graph = compiled.dump(false);
  for (const char* op : {"randn", "gt", "argmax"})
    EXPECT_NE(graph.find(op), std::string::npos) << op << " is not a node of\n" << graph;
}

// detach() inside a compiled function cuts the gradient there, as in eager code: the
// graph's own backward must not flow through the detached use.
TEST(TotalStack, DetachInsideCompileCutsTheGradientAsEagerCodeDoes) {
  const Tensor x = randn({4}, DType::Float64).requires_grad_(true);
  auto f = [](const Tensor& v) {
    return (v.detach() * v * v.detach()).sum() + tanh(v.detach()).sum() * v.sum();
  };
  const Tensor eager = autograd::grad({f(x)}, {x})[0];
  auto compiled = compile(f);
  for (int call = 0; call < 3; ++call) {
    const Tensor got = autograd::grad({compiled(x)}, {x})[0];
    EXPECT_EQ(max_diff(got, eager), 0) << "call " << call;
  }
  const Tensor by_transform = grad([&](const Tensor& v) { return compiled(v); })(x.detach());
  EXPECT_EQ(max_diff(by_transform, eager), 0);
}

// detach() is an op of the stack (Note [detach is an op]): observers see it, compile records it
// as a node, vmap detaches every level, and its result shares memory and versions with its
// input while autograd gives it neither a node nor a tangent, and no view history.
TEST(TotalStack, DetachIsAnOpOfTheStack) {
  const Tensor x = randn({3, 4}, DType::Float64).requires_grad_(true);
  OpNames names;
  detail::set_op_observer(&names);
  Tensor d = x.detach();
  detail::set_op_observer(nullptr);
  EXPECT_TRUE(names.seen.count("detach"));
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.grad_fn(), nullptr);
  EXPECT_EQ(d.data_ptr<double>(), x.data_ptr<double>());
  // An in-place change through the alias is seen by x (the same memory and version counter)
  // and gives x no history.
  const uint64_t before = x.version();
  d.mul_(2.0);
  EXPECT_GT(x.version(), before);
  EXPECT_EQ(x.grad_fn(), nullptr);
  EXPECT_EQ(max_diff(x, d), 0);

  // Forward mode: the tangent stops at detach, as PyTorch's.
  const Tensor t = ones({3, 4}, DType::Float64);
  const auto r = jvp([](const Tensor& v) { return v * v.detach(); }, d, t);
  EXPECT_EQ(max_diff(r.tangents, d), 0);  // d/dv (v * c) = c

  // vmap: the loop of the unbatched op is the oracle, and grad through a vmapped detach is cut.
  const Tensor xs = randn({5, 3}, DType::Float64);
  const Tensor batched = vmap([](const Tensor& v) { return v.detach() * v; })(xs);
  for (int64_t i = 0; i < 5; ++i) {
    const Tensor xi = xs.select(0, i);
    EXPECT_EQ(max_diff(batched.select(0, i), xi.detach() * xi), 0) << i;
  }
  const Tensor g = grad([](const Tensor& v) {
    return vmap([](const Tensor& e) { return (e.detach() * e).sum(); })(v).sum();
  })(xs);
  EXPECT_EQ(max_diff(g, xs), 0);  // d/dv (c v) = c

  // compile records it as a node of the graph, and its replays cut the gradient as eager.
  auto f = [](const Tensor& v) { return (v.detach() * v).sum(); };
  auto compiled = compile(f);
  const Tensor leaf = randn({6}, DType::Float64).requires_grad_(true);
  for (int call = 0; call < 2; ++call) {
    const Tensor got = autograd::grad({compiled(leaf)}, {leaf})[0];
    EXPECT_EQ(max_diff(got, leaf.detach()), 0) << "call " << call;
  }
  const std::string graph = compiled.dump(false);
  EXPECT_NE(graph.find("= detach("), std::string::npos) << graph;

  // On meta: the same shape and dtype, no memory.
  const Tensor m = empty({2, 7}, TensorOptions(DType::Float64).device(kMeta)).detach();
  EXPECT_EQ(m.device(), kMeta);
  EXPECT_EQ(m.shape(), (Shape{2, 7}));
}

// Factories are op structs of the stack too (Note [Factories in the stack] in
// src/ops/factories.cpp): observers see each one under its public name.
TEST(TotalStack, ObserversSeeFactories) {
  OpNames names;
  detail::set_op_observer(&names);
  (void)zeros({2, 3});
  (void)ones({2});
  (void)full({2}, 1.5);
  (void)empty({4});
  (void)arange(5);
  (void)linspace(0.0, 1.0, 4);
  (void)eye(3);
  (void)tensor({1.0, 2.0});
  detail::set_op_observer(nullptr);
  for (const char* op : {"zeros", "ones", "full", "empty", "arange", "linspace", "eye", "tensor"})
    EXPECT_TRUE(names.seen.count(op)) << op << " did not pass the Observe layer";
}

// Under compile a factory is a constant of the graph, not a node: replays give the eager values
// for new inputs without remaking it, and its gradient-free values stay out of the backward.
TEST(TotalStack, CompileKeepsFactoriesAsConstants) {
  auto f = [](const Tensor& x) {
    return (x * arange(4, DType::Float64) + eye(4, std::nullopt, DType::Float64).sum({0}) +
            full({4}, 0.5, DType::Float64) * ones({4}, DType::Float64))
        .sum();
  };
  auto compiled = compile(f);
  for (int call = 0; call < 3; ++call) {
    const Tensor x = randn({4}, DType::Float64).requires_grad_(true);
    const Tensor got = compiled(x);
    EXPECT_EQ(max_diff(got, f(x.detach())), 0) << "call " << call;
    const Tensor g = autograd::grad({got}, {x})[0];
    EXPECT_EQ(max_diff(g, arange(4, DType::Float64)), 0) << "call " << call;
  }
  EXPECT_EQ(compiled.stats().traces, 1);
  const std::string graph = compiled.dump(false);
  size_t constants = 0;
  for (size_t at = graph.find("= constant"); at != std::string::npos;
       at = graph.find("= constant", at + 1))
    ++constants;
  EXPECT_EQ(constants, 4u) << graph;  // arange, eye, full and ones
  for (const char* op : {"= arange(", "= eye(", "= full(", "= ones("})
    EXPECT_EQ(graph.find(op), std::string::npos) << op << " is a node of\n" << graph;
}

// vmap: a factory has no batched input, so it makes one value that broadcasts against the
// examples, as the loop of the unbatched function does.
TEST(TotalStack, VmapOfFactoriesMatchesTheLoop) {
  const Tensor xs = randn({3, 5}, DType::Float64);
  auto f = [](const Tensor& x) {
    return x * arange(5, DType::Float64) + zeros_like(x) + full(x.shape(), 2.0, x.dtype());
  };
  const Tensor batched = vmap(f)(xs);
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_EQ(max_diff(batched.select(0, i), f(xs.select(0, i))), 0) << i;
}

// On meta a factory gives the shape and dtype and writes nothing; from_blob wraps CPU memory
// whatever the default device, and a bad argument is an error naming the factory.
TEST(TotalStack, FactoriesOnMetaFromBlobAndErrors) {
  {
    DeviceGuard meta(kMeta);
    const Tensor z = zeros({1 << 20, 1 << 10});  // 4 GiB if it were allocated
    EXPECT_EQ(z.device(), kMeta);
    EXPECT_EQ(z.shape(), (Shape{1 << 20, 1 << 10}));
    const Tensor a = arange(7);
    EXPECT_EQ(a.device(), kMeta);
    EXPECT_EQ(a.dtype(), DType::Int64);
    std::vector<float> data{1, 2, 3};
    const Tensor wrapped = from_blob(data.data(), {3}, DType::Float32);
    EXPECT_EQ(wrapped.device(), kCPU);
    EXPECT_EQ(wrapped.data_ptr<float>(), data.data());
  }
  std::vector<float> data{1, 2};
  EXPECT_THROW(from_blob(data.data(), {2}, TensorOptions(DType::Float32).device(kMeta)), Error);
  try {
    (void)full({2}, 300, DType::Int8);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("full"), std::string::npos) << e.what();
  }
}

// In-place ops pass the stack too (Note [In-place ops in the stack] in src/ops/inplace.cpp):
// observers see each one, the optimizer's updates among them.
TEST(TotalStack, ObserversSeeInPlaceOpsAndOptimizerUpdates) {
  Tensor x = randn({3, 4}, DType::Float64);
  const Tensor y = randn({3, 4}, DType::Float64);
  const Tensor expected = clamp((x + 1.0) * y, -0.5, 0.5);
  OpNames names;
  detail::set_op_observer(&names);
  x.add_(1.0);
  x.mul_(y);
  x.clamp_(-0.5, 0.5);
  detail::set_op_observer(nullptr);
  EXPECT_EQ(max_diff(x, expected), 0);  // the observed writes are the eager ones
  for (const char* op : {"add_", "mul_", "clamp_"})
    EXPECT_TRUE(names.seen.count(op)) << op << " did not pass the Observe layer";

  names.seen.clear();
  detail::set_op_observer(&names);
  x.copy_(y);
  x.zero_();
  detail::set_op_observer(nullptr);
  EXPECT_TRUE(names.seen.count("copy_"));
  EXPECT_TRUE(names.seen.count("fill_"));
  EXPECT_EQ(abs(x).max().item<double>(), 0);

  // An SGD step with momentum: p -= lr * (momentum buffer), each update an op of the stack.
  Tensor p = randn({5}, DType::Float64).requires_grad_(true);
  const Tensor p0 = p.detach().clone();
  optim::SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  optim::SGD sgd({p}, o);
  (p * p).sum().backward();  // grad 2 p
  names.seen.clear();
  detail::set_op_observer(&names);
  sgd.step();
  detail::set_op_observer(nullptr);
  EXPECT_TRUE(names.seen.count("add_")) << "the step's update was not seen";
  EXPECT_EQ(max_diff(p, p0 - p0 * 2.0 * 0.1), 0);  // the first step's buffer is the gradient

  // Adam's fused step (float32, contiguous) is one op, "adam_step", with the bits of the step
  // taken unobserved.
  Tensor q = randn({7}).requires_grad_(true), r = q.detach().clone().requires_grad_(true);
  optim::Adam seen({q}), unseen({r});
  (q * q).sum().backward();
  (r * r).sum().backward();
  names.seen.clear();
  detail::set_op_observer(&names);
  seen.step();
  detail::set_op_observer(nullptr);
  unseen.step();
  // (the op-by-op update where this CPU's kernel does not round as the ops do)
  EXPECT_TRUE(names.seen.count(optim::detail::adam_fused_available() ? "adam_step" : "add_"))
      << "Adam's update was not seen";
  EXPECT_EQ(max_diff(q, r), 0);
}

// A checkpointed region with a policy turns the OpCache layer on: an in-place op inside it
// passes that layer (its write happens in the recomputation too), and the gradients are those
// of the region run without checkpointing.
TEST(TotalStack, InPlaceOpsInASelectiveCheckpointMatchEagerCode) {
  auto region = [](const std::vector<Tensor>& xs) {
    Tensor h = xs[0] * 2.0;
    h.add_(xs[1]);  // recorded: h has history
    h.mul_(0.5);
    Tensor scratch = zeros(h.shape(), h.dtype());
    scratch.add_(xs[1].detach());              // not recorded: the kernel writes
    return (sin(h) * h * exp(scratch)).sum();  // exp recomputed from the written scratch
  };
  const Tensor x = randn({6}, DType::Float64).requires_grad_(true);
  const Tensor b = randn({6}, DType::Float64).requires_grad_(true);
  const auto eager = autograd::grad({region({x, b})}, {x, b});
  CheckpointOptions options;
  // A policy that names in-place ops too: their writes are not results to keep, and must
  // happen again in the recomputation.
  options.policy = save_ops({"sin", "add_", "mul_"});
  const Tensor loss = checkpoint(region, {x, b}, options);
  EXPECT_EQ(max_diff(loss, region({x, b})), 0);
  const auto got = autograd::grad({loss}, {x, b});
  EXPECT_EQ(max_diff(got[0], eager[0]), 0);
  EXPECT_EQ(max_diff(got[1], eager[1]), 0);
}

}  // namespace
}  // namespace adjoint
