// Backward on several threads at once (Note [Concurrent backward] in src/autograd/engine.cpp):
// through a shared leaf (accumulating into one .grad, also by linear's add-into-.grad path),
// through a subgraph recorded once and shared with retain_graph (backward() and grad()), and
// through independent graphs. The oracle of each is the same work done on one thread. The
// iteration count comes from ADJOINT_CONCURRENCY_ITERS (make tsan and stress runs raise it).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "adjoint/adjoint.h"
#include "support/expect.h"

using namespace adjoint;
using namespace adjoint::testing;

namespace {

constexpr int kThreads = 4;

int iterations() {
  const char* env = std::getenv("ADJOINT_CONCURRENCY_ITERS");
  return env ? std::max(1, std::atoi(env)) : 200;
}

// Runs body(thread index) on kThreads threads released together, rethrowing the first
// failure on the caller (a gtest assertion inside a thread would not stop it).
void run_threads(const std::function<void(int)>& body) {
  std::atomic<int> waiting{kThreads};
  std::vector<std::exception_ptr> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      waiting.fetch_sub(1);
      while (waiting.load() > 0) std::this_thread::yield();
      try {
        body(t);
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// Integer-valued data, so every sum of gradients is exact whatever the order.
Tensor integers(const Shape& shape, int seed) {
  std::vector<double> v(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((seed * 7 + i * 3) % 5) - 2;
  return tensor(v, shape, DType::Float64);
}

void expect_equal(const Tensor& got, const Tensor& want) {
  ASSERT_TRUE(got.defined());
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>());
}

// A node whose backward runs backward itself (as a checkpointed region's recomputation does)
// and reaches nodes that the enclosing run holds. See NestedRunsReachNodesOfTheEnclosingRun.
struct InnerRuns : Function<InnerRuns> {
  static inline Tensor leaf, shared;  // the inner graph starts from `shared`, behind this node
  static inline std::vector<Tensor> inner_grads;
  static inline int runs = 0;
  static std::string name() { return "InnerRuns"; }
  static Tensor forward(FunctionCtx&, const Tensor& h) { return h * 2; }
  static std::vector<Tensor> backward(FunctionCtx&, std::vector<Tensor> g) {
    EnableGradGuard record;  // backward runs with grad mode off; the inner graph is recorded
    for (int i = 0; i < runs; ++i)
      inner_grads.push_back(autograd::grad({(shared * 3).sum()}, {leaf}, {}, true)[0]);
    return {g[0] * 2};
  }
};

}  // namespace

// Inner runs keep the nodes the live outer run has claimed in their own tables, and 200 of
// them wrap the registry of live runs (64 entries) past the outer run's entry, so some inner
// runs register nothing and keep every node in the table (Note [Graph task claims]). Oracle:
// d/dw sum(3 w^2) = 6w for every inner run, d/dw sum(2 w^2) = 4w for the outer one.
TEST(Concurrency, NestedRunsReachNodesOfTheEnclosingRun) {
  const Tensor w = tensor({0.5, -1.5, 2.0}, DType::Float64).requires_grad_(true);
  InnerRuns::leaf = w;
  InnerRuns::shared = w * w;
  InnerRuns::inner_grads.clear();
  InnerRuns::runs = 200;
  InnerRuns::apply(InnerRuns::shared).sum().backward();
  ASSERT_EQ(InnerRuns::inner_grads.size(), 200u);
  const std::vector<double> w_values = w.to_vector<double>();
  auto times = [&](double k) {
    std::vector<double> v = w_values;
    for (double& e : v) e *= k;
    return v;
  };
  for (const Tensor& g : InnerRuns::inner_grads) expect_values(g, times(6), 1e-15);
  expect_values(w.grad(), times(4), 1e-15);
  InnerRuns::leaf = InnerRuns::shared = Tensor();
  InnerRuns::inner_grads.clear();
}

TEST(Concurrency, SharedLeafAccumulatesEveryThreadsGradient) {
  const int n = iterations();
  Tensor w = integers({6}, 1).requires_grad_(true);
  run_threads([&](int t) {
    const Tensor c = integers({6}, t + 2);
    for (int i = 0; i < n; ++i) (w * c + w).sum().backward();  // d/dw = c + 1
  });
  Tensor want = zeros({6}, DType::Float64);
  for (int t = 0; t < kThreads; ++t) want = want + (integers({6}, t + 2) + 1) * n;
  expect_equal(w.grad(), want);
}

TEST(Concurrency, SharedWeightOfLinearAddsIntoOneGrad) {
  // linear's VJP adds gᵀ x straight into an existing .grad (Note [Adding into .grad in
  // place]): under its lock, it and AccumulateGrad of other threads must not interleave.
  const int n = iterations();
  Tensor w = integers({3, 4}, 5).requires_grad_(true);
  Tensor b = zeros({3}, DType::Float64).requires_grad_(true);
  {
    NoGradGuard no_grad;
    w.set_grad(zeros({3, 4}, DType::Float64));  // zero_grad(set_to_none=false)
    b.set_grad(zeros({3}, DType::Float64));
  }
  run_threads([&](int t) {
    const Tensor x = integers({2, 4}, t + 3);
    for (int i = 0; i < n; ++i) linear(x, w, b).sum().backward();  // dW = 1ᵀ x
  });
  Tensor want_w = zeros({3, 4}, DType::Float64);
  for (int t = 0; t < kThreads; ++t)
    want_w = want_w + integers({2, 4}, t + 3).sum({0}).unsqueeze(0).expand({3, 4}) * n;
  expect_equal(w.grad(), want_w);
  expect_equal(b.grad(), full({3}, 2.0 * n * kThreads, DType::Float64));
}

TEST(Concurrency, SharedSubgraphWithRetainGraph) {
  const int n = iterations();
  Tensor w = tensor({0.3, -1.2, 2.5, 0.7}, DType::Float64).requires_grad_(true);
  const Tensor shared = sin(w) * exp(w * 0.5);  // recorded once, walked by every thread
  auto loss = [&](int t) { return (shared * integers({4}, t)).sum(); };
  // Oracles: one thread, one run each.
  std::vector<Tensor> want(kThreads);
  for (int t = 0; t < kThreads; ++t)
    want[t] = autograd::grad({loss(t)}, {w}, {}, /*retain_graph=*/true)[0];
  std::vector<Tensor> losses;
  for (int t = 0; t < kThreads; ++t) losses.push_back(loss(t));

  run_threads([&](int t) {
    for (int i = 0; i < n; ++i) {
      Tensor g = autograd::grad({losses[t]}, {w}, {}, /*retain_graph=*/true)[0];
      if (g.to_vector<double>() != want[t].to_vector<double>())
        throw std::runtime_error("grad() through the shared subgraph differs");
    }
  });
  w.zero_grad();
  run_threads([&](int t) {
    for (int i = 0; i < n; ++i) losses[t].backward({}, /*retain_graph=*/true);
  });
  Tensor sum = zeros({4}, DType::Float64);
  for (int t = 0; t < kThreads; ++t) sum = sum + want[t] * n;
  expect_values(w.grad(), sum.to_vector<double>(), 1e-9 * n);
}

TEST(Concurrency, IndependentGraphsMatchOneThread) {
  const int n = std::max(1, iterations() / 10);
  auto train = [&](int t) {
    Generator gen(static_cast<uint64_t>(t));
    Tensor w1 = (randn({8, 5}, DType::Float64, &gen) * 0.3).requires_grad_(true);
    Tensor w2 = (randn({1, 8}, DType::Float64, &gen) * 0.3).requires_grad_(true);
    const Tensor x = randn({16, 5}, DType::Float64, &gen);
    for (int i = 0; i < n; ++i) {
      Tensor loss = linear(tanh(linear(x, w1)), w2).pow(2).mean();
      loss.backward();
      NoGradGuard no_grad;
      w1.sub_(w1.grad(), 0.1);
      w2.sub_(w2.grad(), 0.1);
      w1.zero_grad(false);
      w2.zero_grad(false);
    }
    return cat({w1.detach().flatten(), w2.detach().flatten()}, 0);
  };
  std::vector<Tensor> want(kThreads), got(kThreads);
  for (int t = 0; t < kThreads; ++t) want[t] = train(t);
  run_threads([&](int t) { got[t] = train(t); });
  for (int t = 0; t < kThreads; ++t) expect_equal(got[t], want[t]);
}
