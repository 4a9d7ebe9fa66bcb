// The dispatch stack (Note [The dispatch stack] in src/dispatch/layer.h): each optional layer
// is on exactly while its guard is alive, all of them at once give what the eager path gives,
// and nodes learn about their backward run from the run, not from grad mode.
#include <gtest/gtest.h>

#include "adjoint/adjoint.h"
#include "autograd/accumulate_grad.h"
#include "autograd/memory_hooks.h"
#include "core/mode_state.h"
#include "dispatch/op_cache.h"

namespace adjoint {
namespace {

bool on(Layer l) { return (tls_mode.layers & layer_bit(l)) != 0; }

double max_diff(const Tensor& a, const Tensor& b) {
  return abs(a.to(DType::Float64) - b.to(DType::Float64)).max().item<double>();
}

TEST(DispatchStack, EachLayerIsOnExactlyWhileItsGuardLives) {
  ASSERT_EQ(tls_mode.layers, 0) << "the eager path has no optional layer on";
  {
    Autocast bf16(DType::BFloat16);
    EXPECT_TRUE(on(Layer::Autocast));
    {
      Autocast off(DType::BFloat16, /*enabled=*/false);
      EXPECT_FALSE(on(Layer::Autocast));
    }
    EXPECT_TRUE(on(Layer::Autocast));
  }
  EXPECT_FALSE(on(Layer::Autocast));
  {
    Profiler profile;
    EXPECT_TRUE(on(Layer::Observe));
    profile.stop();
    EXPECT_FALSE(on(Layer::Observe));
  }
  {
    detail::OpCacheScope hidden(nullptr);
    EXPECT_FALSE(on(Layer::OpCache));
  }
  bool batching_inside = false;
  vmap([&](const Tensor& x) {
    batching_inside = on(Layer::Batching);
    return x * 2.0;
  })(ones({3, 2}));
  EXPECT_TRUE(batching_inside);
  EXPECT_EQ(tls_mode.layers, 0);
}

// Per-example gradients of tanh(x w).sum(), with the function checkpointed, under a profiler,
// inside vmap: the first run passes Observe, OpCache and Batching at once; the recomputation
// (inside backward, where the engine hides observers) OpCache and Batching.
Tensor example_loss(const Tensor& w, const Tensor& x) { return tanh(matmul(x, w)).sum(); }

TEST(DispatchStack, AllLayersTogetherGiveTheLoopsGradients) {
  manual_seed(3);
  const Tensor w = randn({4, 3}, DType::Float64);
  const Tensor xs = randn({5, 2, 4}, DType::Float64);
  auto checkpointed = [](const Tensor& w, const Tensor& x) {
    return checkpoint([](const std::vector<Tensor>& a) { return example_loss(a[0], a[1]); },
                      {w, x});
  };
  Tensor batched;
  {
    Profiler profile;
    batched = vmap(grad(checkpointed), {no_batch, 0})(w, xs);
  }
  ASSERT_EQ(batched.shape(), (Shape{5, 4, 3}));
  for (int64_t b = 0; b < 5; ++b) {
    const Tensor one = grad(example_loss)(w, xs.select(0, b));
    EXPECT_LT(max_diff(batched.select(0, b), one), 1e-12) << "example " << b;
  }
}

TEST(DispatchStack, CheckpointUnderAutocastRecomputesInTheLowDtype) {
  manual_seed(4);
  const Tensor w = randn({16, 8}).requires_grad_();
  const Tensor x = randn({4, 16});
  auto run = [&](bool checkpointed) {
    w.set_grad(Tensor());
    Autocast bf16(DType::BFloat16);
    auto f = [&](const std::vector<Tensor>& a) { return tanh(matmul(a[0], a[1])).sum(); };
    Tensor loss = checkpointed ? checkpoint(f, {x, w}) : f({x, w});
    loss.backward();
    return w.grad().clone();
  };
  const Tensor plain = run(false);
  const Tensor recomputed = run(true);
  EXPECT_EQ(plain.dtype(), DType::Float32);
  EXPECT_EQ(max_diff(plain, recomputed), 0.0) << "the recomputation casts as the first run did";
}

// Observers chain; the Observe layer tells the whole chain that an op failed whatever threw,
// an observer above included, so that those below (a profiler) close what they opened.
struct CountingObserver : detail::OpObserver {
  int begun = 0, ended = 0, failed = 0;
  void before_forward_op(const char* op) override { ++begun; }
  void after_forward_op(const char* op) override { ++ended; }
  void forward_op_failed(const char* op) override { ++failed; }
};
struct ThrowingObserver : detail::OpObserver {
  explicit ThrowingObserver(OpObserver* below) { next_ = below; }
  void forward_op_tensors(const char*, const Tensor*, std::size_t, const Tensor&) override {
    throw std::runtime_error("observer out of memory");
  }
};

TEST(DispatchStack, AnObserverThatThrowsFailsTheOpForTheWholeChain) {
  CountingObserver below;
  ThrowingObserver above(&below);
  detail::set_op_observer(&above);
  EXPECT_THROW(exp(ones({2})), std::runtime_error);
  detail::set_op_observer(nullptr);
  EXPECT_EQ(below.begun, 1);
  EXPECT_EQ(below.failed, 1);
  EXPECT_EQ(below.ended, 0);
}

// AccumulateGrad keeps the incoming gradient itself under create_graph (it carries the graph
// of the gradient) and a copy otherwise; it must learn which from the run it is applied in,
// whatever grad mode says.
TEST(DispatchStack, NodesLearnCreateGraphFromTheRun) {
  const Tensor leaf = zeros({3}).requires_grad_();
  for (const bool create_graph : {false, true}) {
    leaf.set_grad(Tensor());
    const Edge e = autograd::gradient_edge(leaf);
    const Tensor g = full({3}, 2.0);
    const Tensor other_handle = g;  // a second owner: without create_graph, .grad is a copy
    TensorList grads;
    grads.push_back(g);
    NoGradGuard no_grad;  // grad mode says "not recording" either way
    e.node->apply(std::move(grads), BackwardRun{create_graph, false, nullptr});
    ASSERT_TRUE(leaf.grad().defined());
    EXPECT_EQ(max_diff(leaf.grad(), other_handle), 0.0);
    EXPECT_EQ(leaf.grad().impl() == other_handle.impl(), create_graph);
  }
}

}  // namespace
}  // namespace adjoint
