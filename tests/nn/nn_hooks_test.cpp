// Tests for module hooks: forward pre-hooks and hooks fire in registration order around
// module(x) (also on children inside a model) with the tensors forward sees, replacements
// change what forward and the caller get, removal by handle stops a hook; backward hooks get
// grad_input/grad_output equal to autograd::grad's and to the Linear formula, may replace
// grad_input, see only their own call's share of a residual input; bad hook results and
// double removals are named errors.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "adjoint/adjoint.h"
#include "adjoint/nn.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {

void expect_close(const Tensor& got, const Tensor& want, double tol = 1e-12) {
  ASSERT_TRUE(got.defined());
  ASSERT_TRUE(want.defined());
  ASSERT_EQ(got.shape(), want.shape());
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(g[i], w[i], tol) << "at " << i;
}

std::shared_ptr<nn::Linear> linear64(int64_t in, int64_t out, uint64_t seed) {
  Generator gen(seed);
  auto m = std::make_shared<nn::Linear>(in, out, true, &gen);
  m->to(DType::Float64);
  return m;
}

Tensor randn64(Shape shape, uint64_t seed, bool requires_grad = false) {
  Generator gen(seed);
  return randn(shape, DType::Float64, &gen).requires_grad_(requires_grad);
}

}  // namespace

TEST(ModuleHooks, ForwardHooksFireInOrderWithTheTensorsForwardSees) {
  auto fc = linear64(3, 2, 1);
  Tensor x = randn64({4, 3}, 2);
  const Tensor direct = linear(x, fc->weight, fc->bias);
  std::vector<std::string> events;
  Tensor pre_seen, post_in, post_out;
  fc->register_forward_pre_hook([&](nn::Module& m, const Tensor& in) {
    EXPECT_EQ(&m, fc.get());
    events.push_back("pre A");
    pre_seen = in;
  });
  fc->register_forward_pre_hook([&](nn::Module&, const Tensor&) { events.push_back("pre B"); });
  fc->register_forward_hook([&](nn::Module&, const Tensor& in, const Tensor& out) {
    events.push_back("post C");
    post_in = in;
    post_out = out;
  });
  fc->register_forward_hook(
      [&](nn::Module&, const Tensor&, const Tensor&) { events.push_back("post D"); });
  Tensor y = (*fc)(x);
  EXPECT_EQ(events, (std::vector<std::string>{"pre A", "pre B", "post C", "post D"}));
  EXPECT_TRUE(pre_seen.is_same(x));
  EXPECT_TRUE(post_in.is_same(x));
  expect_close(post_out, direct);
  expect_close(y, direct);
  // forward() itself bypasses the hooks, as in PyTorch.
  events.clear();
  fc->forward(x);
  EXPECT_TRUE(events.empty());
}

TEST(ModuleHooks, ReplacementsChangeTheInputAndWhatTheCallerGets) {
  auto fc = linear64(3, 2, 3);
  Tensor x = randn64({4, 3}, 4);
  fc->register_forward_pre_hook(
      [](nn::Module&, const Tensor& in) -> std::optional<Tensor> { return in * 2.0; });
  Tensor second_saw;
  fc->register_forward_hook([](nn::Module&, const Tensor&,
                               const Tensor& out) -> std::optional<Tensor> { return out + 1.0; });
  fc->register_forward_hook([&](nn::Module&, const Tensor& in, const Tensor& out) {
    expect_close(in, x * 2.0);  // the replaced input
    second_saw = out;
  });
  Tensor y = (*fc)(x);
  const Tensor want = linear(x * 2.0, fc->weight, fc->bias) + 1.0;
  expect_close(y, want);
  expect_close(second_saw, want);
}

TEST(ModuleHooks, RemovedHooksNoLongerFireAndASecondRemovalIsAnError) {
  auto fc = linear64(3, 2, 5);
  Tensor x = randn64({1, 3}, 6);
  int pre = 0, post = 0;
  nn::ModuleHookHandle a =
      fc->register_forward_pre_hook([&](nn::Module&, const Tensor&) { ++pre; });
  nn::ModuleHookHandle b =
      fc->register_forward_hook([&](nn::Module&, const Tensor&, const Tensor&) { ++post; });
  (*fc)(x);
  EXPECT_EQ(pre, 1);
  EXPECT_EQ(post, 1);
  a.remove();
  (*fc)(x);
  EXPECT_EQ(pre, 1);
  EXPECT_EQ(post, 2);
  nn::ModuleHookHandle copy = b;
  b.remove();
  (*fc)(x);
  EXPECT_EQ(post, 2);
  expect_error([&] { copy.remove(); }, ErrorKind::Value,
               {"[nn.Linear]", "forward hook", "of Linear was already removed"});
  expect_error([&] { a.remove(); }, ErrorKind::Value, {"forward pre-hook", "already removed"});
  expect_error([] { nn::ModuleHookHandle().remove(); }, ErrorKind::Value,
               {"empty ModuleHookHandle"});
  // Once the module is gone its hooks are too: removing is then a no-op.
  nn::ModuleHookHandle orphan;
  {
    auto tmp = linear64(2, 2, 7);
    orphan = tmp->register_forward_hook([](nn::Module&, const Tensor&, const Tensor&) {});
  }
  EXPECT_NO_THROW(orphan.remove());
}

TEST(ModuleHooks, AHookMayRemoveItselfWhileRunning) {
  auto fc = linear64(3, 2, 8);
  int fired = 0;
  nn::ModuleHookHandle h;
  h = fc->register_forward_hook([&](nn::Module&, const Tensor&, const Tensor&) {
    ++fired;
    h.remove();
  });
  (*fc)(randn64({1, 3}, 9));
  (*fc)(randn64({1, 3}, 9));
  EXPECT_EQ(fired, 1);
}

TEST(ModuleHooks, WrongShapesAreNamedErrors) {
  auto fc = linear64(3, 2, 10);
  Tensor x = randn64({4, 3}, 11);
  nn::ModuleHookHandle h = fc->register_forward_hook(
      [](nn::Module&, const Tensor&, const Tensor& out) -> std::optional<Tensor> {
        return out.sum();
      });
  expect_error([&] { (*fc)(x); }, ErrorKind::Shape,
               {"[nn.Linear]", "forward hook", "of Linear returned [] (float64) as the new output",
                "[4, 2] (float64)"});
  h.remove();
  h = fc->register_forward_pre_hook(
      [](nn::Module&, const Tensor& in) -> std::optional<Tensor> { return in.narrow(1, 0, 2); });
  expect_error([&] { (*fc)(x); }, ErrorKind::Shape, {"forward pre-hook", "as the new input"});
}

TEST(ModuleHooks, HooksOnChildrenFireInsideAModel) {
  Generator gen(12);
  auto mlp =
      std::make_shared<nn::MLP>(std::vector<int64_t>{3, 5, 2}, nn::Activation::Tanh, true, &gen);
  mlp->to(DType::Float64);
  auto first = mlp->at<nn::Linear>(0);
  auto act = (*mlp)[1];
  Tensor x = randn64({4, 3}, 13);
  std::vector<std::string> order;
  Tensor act_out;
  first->register_forward_hook(
      [&](nn::Module&, const Tensor&, const Tensor&) { order.push_back("0"); });
  act->register_forward_hook([&](nn::Module&, const Tensor&, const Tensor& out) {
    order.push_back("1");
    act_out = out;
  });
  mlp->register_forward_hook(
      [&](nn::Module&, const Tensor&, const Tensor&) { order.push_back("mlp"); });
  (*mlp)(x);
  EXPECT_EQ(order, (std::vector<std::string>{"0", "1", "mlp"}));
  expect_close(act_out, tanh(linear(x, first->weight, first->bias)));
}

TEST(ModuleHooks, BackwardHookGetsTheGradientsAutogradGrad) {
  // loss = sum(tanh(fc2(tanh(fc1(x))))^2); the hook sits on fc2.
  auto fc1 = linear64(3, 4, 20), fc2 = linear64(4, 2, 21);
  Tensor x = randn64({5, 3}, 22);
  Tensor seen_in, seen_out, hook_gi, hook_go;
  int fired = 0;
  fc2->register_forward_hook([&](nn::Module&, const Tensor& in, const Tensor& out) {
    seen_in = in;
    seen_out = out;
  });
  fc2->register_full_backward_hook(
      [&](nn::Module& m, const Tensor& grad_input, const Tensor& grad_output) {
        EXPECT_EQ(&m, fc2.get());
        ++fired;
        hook_gi = grad_input;
        hook_go = grad_output;
      });
  Tensor h = tanh((*fc1)(x));
  Tensor loss = tanh((*fc2)(h)).square().sum();
  std::vector<Tensor> oracle = autograd::grad({loss}, {seen_in, seen_out}, {}, true);
  // The identities lie on the path to fc2's input, so autograd::grad fires the hook too.
  EXPECT_EQ(fired, 1);
  expect_close(hook_go, oracle[1]);
  expect_close(hook_gi, oracle[0]);
  hook_gi = hook_go = Tensor();
  loss.backward();
  EXPECT_EQ(fired, 2);
  expect_close(hook_go, oracle[1]);
  expect_close(hook_gi, oracle[0]);
  // Independently: for y = x Wᵀ + b, dL/dx = dL/dy W.
  expect_close(hook_gi, matmul(hook_go, fc2->weight));
}

TEST(ModuleHooks, BackwardHookMayReplaceGradInput) {
  auto fc1 = linear64(3, 4, 30), fc2 = linear64(4, 2, 31);
  Tensor x = randn64({5, 3}, 32);
  auto run = [&] {
    fc1->zero_grad();
    fc2->zero_grad();
    (*fc2)(tanh((*fc1)(x))).square().sum().backward();
  };
  run();
  const Tensor fc2_grad = fc2->weight.grad().clone();
  fc2->register_full_backward_hook([](nn::Module&, const Tensor& gi,
                                      const Tensor&) -> std::optional<Tensor> { return gi * 0.0; });
  run();
  expect_close(fc2->weight.grad(), fc2_grad);  // the module's own gradients are untouched
  expect_close(fc1->weight.grad(), zeros({4, 3}, DType::Float64));
  expect_close(fc1->bias.grad(), zeros({4}, DType::Float64));
}

TEST(ModuleHooks, BackwardHookSeesOnlyItsCallsShareOfAResidualInput) {
  auto fc = linear64(3, 3, 40);
  Tensor x = randn64({2, 3}, 41, /*requires_grad=*/true);
  Tensor gi, go;
  fc->register_full_backward_hook(
      [&](nn::Module&, const Tensor& grad_input, const Tensor& grad_output) {
        gi = grad_input;
        go = grad_output;
      });
  Tensor y = x + (*fc)(x);
  y.square().sum().backward();
  expect_close(go, y * 2.0);
  expect_close(gi, matmul(go, fc->weight));  // not + go, the residual's share
  expect_close(x.grad(), go + matmul(go, fc->weight));
}

TEST(ModuleHooks, BackwardHookWithAnInputThatNeedsNoGradient) {
  auto fc = linear64(3, 2, 50);
  Tensor x = randn64({4, 3}, 51);  // data: no gradient
  Tensor gi = ones({1}), go;
  fc->register_full_backward_hook(
      [&](nn::Module&, const Tensor& grad_input, const Tensor& grad_output) {
        gi = grad_input;
        go = grad_output;
      });
  Tensor y = (*fc)(x);
  y.sum().backward();
  EXPECT_FALSE(gi.defined());
  expect_close(go, ones({4, 2}, DType::Float64));
}

TEST(ModuleHooks, BackwardHookFiresOncePerCallAndNotAfterRemoval) {
  auto fc = linear64(2, 2, 60);
  Tensor x = randn64({1, 2}, 61, true);
  std::vector<Tensor> outs;
  nn::ModuleHookHandle h = fc->register_full_backward_hook(
      [&](nn::Module&, const Tensor&, const Tensor& go) { outs.push_back(go); });
  Tensor y1 = (*fc)(x);
  Tensor y2 = (*fc)(y1);
  (y2 * 3.0).sum().backward();
  ASSERT_EQ(outs.size(), 2u);
  expect_close(outs[0], full({1, 2}, 3.0, DType::Float64));  // the outer call first
  expect_close(outs[1], matmul(outs[0], fc->weight));
  // Removed between forward and backward: it does not fire.
  Tensor y = (*fc)(x);
  h.remove();
  y.sum().backward();
  EXPECT_EQ(outs.size(), 2u);
}

TEST(ModuleHooks, BackwardHookReturningAWrongShapeIsANamedError) {
  auto fc = linear64(3, 2, 70);
  Tensor x = randn64({4, 3}, 71, true);
  fc->register_full_backward_hook(
      [](nn::Module&, const Tensor& gi, const Tensor&) -> std::optional<Tensor> {
        return gi.narrow(0, 0, 1);
      });
  Tensor loss = (*fc)(x).sum();
  expect_error(
      [&] { loss.backward(); }, ErrorKind::Shape,
      {"[nn.Linear]", "backward hook", "of Linear returned [1, 3] (float64)", "[4, 3] (float64)"});
}

TEST(ModuleHooks, NoHooksAndNoGradMeanPlainForward) {
  auto fc = linear64(3, 2, 80);
  Tensor x = randn64({2, 3}, 81, true);
  Tensor y = (*fc)(x);
  EXPECT_EQ(y.grad_fn()->name(), "LinearBackward");
  int fired = 0;
  fc->register_full_backward_hook([&](nn::Module&, const Tensor&, const Tensor&) { ++fired; });
  EXPECT_EQ((*fc)(x).grad_fn()->name(), "ModuleOutputHookBackward");
  NoGradGuard no_grad;
  EXPECT_FALSE((*fc)(x).requires_grad());  // not wrapped: nothing to catch
}

TEST(ModuleHooks, HooksFireInsideAGptAndItsLoss) {
  Generator gen(90);
  auto gpt = std::make_shared<nn::GPT>(
      nn::GPTConfig{.vocab = 16, .context = 8, .d_model = 8, .heads = 2, .layers = 3}, &gen);
  gpt->to(DType::Float64);
  Tensor idx = randint(0, 16, {2, 8}, &gen), targets = randint(0, 16, {2, 8}, &gen);
  std::vector<std::string> order;
  std::vector<nn::ModuleHookHandle> handles;
  for (const auto& [name, m] : gpt->named_modules())
    if (name.starts_with("blocks.") && name.find('.', 7) == std::string::npos)
      handles.push_back(m->register_forward_hook(
          [&, name](nn::Module&, const Tensor&, const Tensor&) { order.push_back(name); }));
  auto block1 = gpt->blocks->at<nn::Block>(1);
  Tensor block1_out, go;
  handles.push_back(block1->register_forward_hook(
      [&](nn::Module&, const Tensor&, const Tensor& out) { block1_out = out; }));
  handles.push_back(block1->register_full_backward_hook(
      [&](nn::Module&, const Tensor&, const Tensor& g) { go = g; }));
  Tensor loss = gpt->loss(idx, targets);
  EXPECT_EQ(order, (std::vector<std::string>{"blocks.0", "blocks.1", "blocks.2"}));
  const Tensor oracle = autograd::grad({loss}, {block1_out}, {}, true)[0];
  loss.backward();
  expect_close(go, oracle);
  for (nn::ModuleHookHandle& h : handles) h.remove();
  order.clear();
  gpt->loss(idx, targets);
  EXPECT_TRUE(order.empty());
}
