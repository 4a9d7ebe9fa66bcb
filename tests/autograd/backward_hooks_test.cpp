// The engine's two hooks for data-parallel training: a leaf's post-accumulate-grad hook runs
// once per backward() run, after its .grad is final (also when linear's VJP added the weight
// gradient straight into .grad), never for grad(); queue_callback runs at the end of the run,
// after every hook. The oracle for the gradient a hook sees is autograd::grad of the same loss.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "support/expect.h"

namespace adjoint {
namespace {

using testing::expect_error;

double max_diff(const Tensor& a, const Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST(PostAccumulateGradHook, RunsOncePerBackwardWithTheFinalGrad) {
  Generator gen(3);
  const Tensor w = randn({4}, DType::Float64, &gen).requires_grad_();
  // w reaches the loss along two paths: its .grad is final only after both are summed.
  auto loss = [&] { return (w * w).sum() + (w.exp() * 2.0).sum(); };
  const Tensor want = autograd::grad({loss()}, {w})[0];
  std::vector<Tensor> seen;
  HookHandle h = w.register_post_accumulate_grad_hook(
      [&](const Tensor& leaf) { seen.push_back(leaf.grad().clone()); });
  loss().backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_LT(max_diff(seen[0], want), 1e-15);
  loss().backward();  // accumulates: the hook sees the sum
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_LT(max_diff(seen[1], want * 2.0), 1e-14);
  autograd::grad({loss()}, {w});  // grad() never writes .grad: no hook
  EXPECT_EQ(seen.size(), 2u);
  h.remove();
  loss().backward();
  EXPECT_EQ(seen.size(), 2u);
}

// linear's VJP adds dW straight into an existing .grad (Note [Adding into .grad in place]);
// the weight's AccumulateGrad then gets no gradient, and must still run the hook. The shortcut
// is seen in the allocator's peak: dW (1 MiB) is never made.
TEST(PostAccumulateGradHook, RunsWhenTheVjpAddedIntoGrad) {
  Generator gen(5);
  const Tensor x = randn({1, 512}, {}, &gen), r = randn({1, 512}, {}, &gen);
  const Tensor w = randn({512, 512}, {}, &gen).requires_grad_();
  auto loss = [&] { return (linear(x, w) * r).sum(); };
  const Tensor want = autograd::grad({loss()}, {w})[0];
  loss().backward();
  w.zero_grad(/*set_to_none=*/false);
  int calls = 0;
  Tensor seen;
  w.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    ++calls;
    seen = leaf.grad();  // a handle, no copy: a clone here would be the peak measured below
  });
  const Tensor l = loss();
  const std::size_t before = memory_stats().current_bytes;
  reset_peak_memory_stats();
  l.backward();
  EXPECT_LT(memory_stats().peak_bytes - before, std::size_t{512} * 512 * 4 / 2)
      << "the VJP added into .grad (no dW buffer)";
  ASSERT_EQ(calls, 1);
  EXPECT_EQ(max_diff(seen, want), 0.0);
}

TEST(PostAccumulateGradHook, RunsOncePerBackwardUnderCheckpointing) {
  Generator gen(7);
  const Tensor w = randn({3, 3}, DType::Float64, &gen).requires_grad_();
  const Tensor x = randn({2, 3}, DType::Float64, &gen);
  int calls = 0;
  w.register_post_accumulate_grad_hook([&](const Tensor&) { ++calls; });
  auto block = [&](const std::vector<Tensor>& a) { return tanh(matmul(a[0], w)); };
  Tensor y = checkpoint(block, {x});
  (checkpoint(block, {y}).sum()).backward();
  EXPECT_EQ(calls, 1);
}

TEST(PostAccumulateGradHook, NeedsALeafThatRequiresGrad) {
  const Tensor w = ones({2}).requires_grad_();
  expect_error([&] { ones({2}).register_post_accumulate_grad_hook([](const Tensor&) {}); },
               ErrorKind::Autograd, {"register_post_accumulate_grad_hook", "leaf"});
  expect_error([&] { (w * 2.0).register_post_accumulate_grad_hook([](const Tensor&) {}); },
               ErrorKind::Autograd, {"register_post_accumulate_grad_hook", "grad_fn"});
}

// A callback that queues others while it runs (the list grows under it, past its capacity)
// and reads its captures afterwards; one that throws does not stop the rest, and backward()
// rethrows the first error.
TEST(QueueCallback, CallbacksQueueMoreAndAnErrorDoesNotStopTheOthers) {
  const Tensor a = ones({2}).requires_grad_();
  std::vector<int> ran;
  const std::string label = "a capture read after queueing";
  std::string seen;
  a.register_post_accumulate_grad_hook([&](const Tensor&) {
    autograd::queue_callback([&ran, &seen, label] {
      for (int i = 0; i < 64; ++i) autograd::queue_callback([&ran, i] { ran.push_back(i); });
      seen = label;  // the closure must still be alive here
    });
    autograd::queue_callback([] { throw Error(ErrorKind::Value, "test", "first"); });
    autograd::queue_callback([] { throw Error(ErrorKind::Value, "test", "second"); });
  });
  expect_error([&] { (a * 2.0).sum().backward(); }, ErrorKind::Value, {"[test]", "first"});
  EXPECT_EQ(seen, label);
  ASSERT_EQ(ran.size(), 64u);
  EXPECT_EQ(ran.back(), 63);
}

TEST(QueueCallback, RunsAtTheEndOfTheRunAfterEveryHook) {
  const Tensor a = ones({2}).requires_grad_(), b = ones({3}).requires_grad_();
  std::vector<std::string> order;
  a.register_post_accumulate_grad_hook([&](const Tensor&) {
    order.push_back("a");
    autograd::queue_callback([&] {
      order.push_back("end");
      autograd::queue_callback([&] { order.push_back("queued by a callback"); });
    });
  });
  b.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back("b"); });
  ((a * 2.0).sum() + (b * 3.0).sum()).backward();
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order[2], "end");
  EXPECT_EQ(order[3], "queued by a callback");
  // The callback list belongs to that run: the next run starts empty.
  order.clear();
  (b * 3.0).sum().backward();
  EXPECT_EQ(order, std::vector<std::string>{"b"});
  expect_error([] { autograd::queue_callback([] {}); }, ErrorKind::Autograd,
               {"queue_callback", "outside a backward run"});
}

}  // namespace
}  // namespace adjoint
