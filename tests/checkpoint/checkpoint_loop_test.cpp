// checkpoint_loop: the binomial schedule's recomputations against dynamic programming (the
// known optimum), gradients against the plain loop, the memory it holds, and its errors.
#include "adjoint/checkpoint_loop.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "adjoint/adjoint.h"
#include "dispatch/op_observer.h"
#include "support/expect.h"

using namespace adjoint;
using adjoint::testing::expect_error;

namespace {

// The fewest untaped step calls that reverse n steps from a stored state with s free slots,
// by exhaustive dynamic programming over where the next snapshot goes (the oracle, written
// without the closed form): advance m, reverse the tail with one slot less, then the head.
int64_t reversal_dp(int64_t n, int64_t s, std::map<std::pair<int64_t, int64_t>, int64_t>& memo) {
  if (n <= 1) return 0;
  if (s == 0) return n * (n - 1) / 2;  // re-advance from the start for every step
  auto key = std::make_pair(n, s);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  int64_t best = INT64_MAX;
  for (int64_t m = 1; m < n; ++m)
    best = std::min(best, m + reversal_dp(n - m, s - 1, memo) + reversal_dp(m, s, memo));
  return memo[key] = best;
}

// The same when the forward pass may store its snapshots for free on the way to the output:
// the first advance costs nothing and its tail is again this situation.
int64_t backward_dp(int64_t n, int64_t s, std::map<std::pair<int64_t, int64_t>, int64_t>& memo,
                    std::map<std::pair<int64_t, int64_t>, int64_t>& tmemo) {
  if (n <= 1) return 0;
  if (s == 0) return n * (n - 1) / 2;
  auto key = std::make_pair(n, s);
  if (auto it = memo.find(key); it != memo.end()) return it->second;
  int64_t best = INT64_MAX;
  for (int64_t m = 1; m < n; ++m)
    best = std::min(best, backward_dp(n - m, s - 1, memo, tmemo) + reversal_dp(m, s, tmemo));
  return memo[key] = best;
}

// Counts the step's calls with and without grad mode (taped and untaped).
struct Counter {
  int64_t taped = 0, untaped = 0;
  LoopStep step() {
    return [this](int64_t, const std::vector<Tensor>& x, const std::vector<Tensor>& p) {
      (is_grad_enabled() ? taped : untaped)++;
      return std::vector<Tensor>{sin(x[0]) * p[0] + x[0] * 0.5};
    };
  }
};

// A projectile with quadratic drag, explicit Euler: state (position, velocity), params (drag,
// gravity). Each param is read once per step, so gradients sum in the same order as the plain
// loop's and agree bitwise.
std::vector<Tensor> projectile_step(int64_t, const std::vector<Tensor>& s,
                                    const std::vector<Tensor>& p) {
  const double dt = 0.01;
  const Tensor& pos = s[0];
  const Tensor& vel = s[1];
  Tensor speed = sqrt((vel * vel).sum());
  Tensor acc = p[1] - p[0] * speed * vel;
  return {pos + vel * dt, vel + acc * dt};
}

struct Projectile {
  Tensor pos = tensor({0.0, 0.0}, DType::Float64);
  Tensor vel = tensor({30.0, 40.0}, DType::Float64).requires_grad_(true);
  Tensor drag = scalar_tensor(0.02, DType::Float64).requires_grad_(true);
  Tensor gravity = tensor({0.0, -9.81}, DType::Float64).requires_grad_(true);
  std::vector<Tensor> state() const { return {pos, vel}; }
  std::vector<Tensor> params() const { return {drag, gravity}; }
};

Tensor miss(const std::vector<Tensor>& final_state) {
  Tensor d = final_state[0] - tensor({60.0, 0.0}, DType::Float64);
  return (d * d).sum();
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_vector<double>() == b.to_vector<double>();
}

std::vector<Tensor> plain_loop(const LoopStep& step, std::vector<Tensor> x,
                               const std::vector<Tensor>& params, int64_t steps) {
  for (int64_t i = 0; i < steps; ++i) x = step(i, x, params);
  return x;
}

}  // namespace

TEST(CheckpointLoop, RecomputationsAreTheDynamicProgrammingOptimum) {
  std::map<std::pair<int64_t, int64_t>, int64_t> memo, tmemo;
  for (int64_t snapshots = 1; snapshots <= 6; ++snapshots) {
    for (int64_t n = 1; n <= 40; ++n) {
      Counter c;
      Tensor x0 = scalar_tensor(0.3, DType::Float64);
      Tensor w = scalar_tensor(0.9, DType::Float64).requires_grad_(true);
      std::vector<Tensor> out = checkpoint_loop(c.step(), {x0}, {w}, n, snapshots);
      EXPECT_EQ(c.untaped, n);  // the forward pass: once through, nothing taped
      EXPECT_EQ(c.taped, 0);
      c.untaped = 0;
      out[0].backward();
      const int64_t optimum = backward_dp(n, snapshots - 1, memo, tmemo);
      EXPECT_EQ(c.untaped, optimum) << "n " << n << " snapshots " << snapshots;
      EXPECT_EQ(c.taped, n);  // every step's VJP exactly once
      const CheckpointLoopPlan plan = checkpoint_loop_plan(n, snapshots);
      EXPECT_EQ(plan.backward_advances, optimum) << "n " << n << " snapshots " << snapshots;
      EXPECT_EQ(plan.taped_steps, n);
      EXPECT_LE(plan.forward_snapshots, snapshots - 1);
    }
  }
}

// Griewank's classical count (every advance, the forward sweep included, when the output comes
// from the last taped step) is the DP of reversal_dp; the plan's numbers relate to it by the
// forward sweep the loop needs for its output anyway.
TEST(CheckpointLoop, TenThousandStepsWithTwentySnapshots) {
  const CheckpointLoopPlan plan = checkpoint_loop_plan(10000, 20);
  EXPECT_EQ(plan.forward_snapshots, 19);
  EXPECT_LT(plan.recompute_ratio(), 3.0);  // about 2.8 extra forward passes
  Counter c;
  Tensor x0 = scalar_tensor(0.3, DType::Float64);
  Tensor w = scalar_tensor(0.9, DType::Float64).requires_grad_(true);
  checkpoint_loop(c.step(), {x0}, {w}, 10000, 20)[0].backward();
  EXPECT_EQ(c.untaped - 10000, plan.backward_advances);
  EXPECT_EQ(c.taped, 10000);
  Tensor w2 = scalar_tensor(0.9, DType::Float64).requires_grad_(true);
  Counter plain;
  plain_loop(plain.step(), {x0}, {w2}, 10000)[0].backward();
  EXPECT_EQ(w.grad().item<double>(), w2.grad().item<double>());
}

TEST(CheckpointLoop, GradientsEqualThePlainLoopBitwise) {
  for (int64_t snapshots : {1, 2, 5, 30}) {
    Projectile a, b;
    miss(plain_loop(projectile_step, a.state(), a.params(), 120)).backward();
    miss(checkpoint_loop(projectile_step, b.state(), b.params(), 120, snapshots)).backward();
    for (auto [x, y] : {std::pair{a.vel, b.vel}, {a.drag, b.drag}, {a.gravity, b.gravity}}) {
      ASSERT_TRUE(y.grad().defined());
      EXPECT_TRUE(same(x.grad(), y.grad())) << "snapshots " << snapshots << "\n"
                                            << x.grad() << "\n"
                                            << y.grad();
    }
  }
}

TEST(CheckpointLoop, WorksWithTheFunctionalGradAndLeavesGradAlone) {
  Projectile a, b;
  std::vector<Tensor> ga = autograd::grad(
      {miss(plain_loop(projectile_step, a.state(), a.params(), 50))}, {a.vel, a.drag, a.gravity});
  std::vector<Tensor> gb =
      autograd::grad({miss(checkpoint_loop(projectile_step, b.state(), b.params(), 50, 4))},
                     {b.vel, b.drag, b.gravity});
  for (std::size_t i = 0; i < ga.size(); ++i) EXPECT_TRUE(same(ga[i], gb[i]));
  EXPECT_FALSE(b.drag.grad().defined());
}

TEST(CheckpointLoop, HoldsOnlyItsSnapshots) {
  // A state of 20,000 doubles (160 KB) run for 400 steps: the plain graph keeps hundreds of
  // states; the checkpointed loop at most its 6 snapshots plus one step's graph and gradients.
  const int64_t n = 20000, steps = 400, snapshots = 6;
  const double state_bytes = n * 8.0;
  Tensor x0 = ones({n}, DType::Float64);
  Tensor w = scalar_tensor(0.9, DType::Float64).requires_grad_(true);
  Counter c;
  const std::size_t base = memory_stats().current_bytes;
  reset_peak_memory_stats();
  checkpoint_loop(c.step(), {x0}, {w}, steps, snapshots)[0].sum().backward();
  const double peak_states = (memory_stats().peak_bytes - base) / state_bytes;
  EXPECT_LE(peak_states, snapshots + 8) << "peak " << peak_states << " states";

  Tensor w2 = scalar_tensor(0.9, DType::Float64).requires_grad_(true);
  reset_peak_memory_stats();
  plain_loop(c.step(), {x0}, {w2}, steps)[0].sum().backward();
  const double plain_states = (memory_stats().peak_bytes - base) / state_bytes;
  EXPECT_GT(plain_states, steps);  // sin saves its input, the product its operands
  EXPECT_NEAR(w.grad().item<double>(), w2.grad().item<double>(),
              1e-12 * std::abs(w2.grad().item<double>()));
}

TEST(CheckpointLoop, Errors) {
  Projectile p;
  expect_error([&] { checkpoint_loop(projectile_step, p.state(), p.params(), -1, 3); },
               ErrorKind::Value, {"checkpoint_loop"});
  expect_error([&] { checkpoint_loop(projectile_step, p.state(), p.params(), 10, 0); },
               ErrorKind::Value, {"checkpoint_loop"});
  expect_error([&] { checkpoint_loop(projectile_step, {}, p.params(), 10, 3); }, ErrorKind::Value,
               {"checkpoint_loop"});
  // A step that changes the state's shape.
  LoopStep grows = [](int64_t, const std::vector<Tensor>& s, const std::vector<Tensor>&) {
    return std::vector<Tensor>{cat({s[0], s[0]}, 0), s[1]};
  };
  expect_error([&] { checkpoint_loop(grows, p.state(), p.params(), 3, 2); }, ErrorKind::Shape,
               {"checkpoint_loop"});
  // A captured tensor that requires grad: its gradient would be lost, so backward refuses.
  Tensor hidden = scalar_tensor(0.5, DType::Float64).requires_grad_(true);
  LoopStep captures = [&](int64_t i, const std::vector<Tensor>& s, const std::vector<Tensor>& q) {
    std::vector<Tensor> out = projectile_step(i, s, q);
    out[1] = out[1] * hidden;
    return out;
  };
  Tensor loss = miss(checkpoint_loop(captures, p.state(), p.params(), 5, 2));
  expect_error([&] { loss.backward(); }, ErrorKind::Autograd, {"checkpoint_loop"});
  // Double backward is refused with a clear error.
  Projectile q;
  Tensor l2 = miss(checkpoint_loop(projectile_step, q.state(), q.params(), 5, 2));
  expect_error([&] { autograd::grad({l2}, {q.drag}, {}, true, /*create_graph=*/true); },
               ErrorKind::NotImplemented, {"checkpoint_loop"});
}

TEST(CheckpointLoop, InPlaceEditOfAnInputBeforeBackwardThrows) {
  Projectile p;
  Tensor pos = p.pos.clone();
  Tensor loss = miss(checkpoint_loop(projectile_step, {pos, p.vel}, p.params(), 5, 2));
  pos.add_(1.0);
  EXPECT_THROW(loss.backward(), Error);
}

TEST(CheckpointLoop, ForwardModeThroughTheLoopThrows) {
  Projectile p;
  DualLevel level;
  Tensor vel = make_dual(p.vel.detach(), ones_like(p.vel));
  EXPECT_THROW(checkpoint_loop(projectile_step, {p.pos, vel}, p.params(), 5, 2), Error);
}

TEST(CheckpointLoop, WithoutGradItIsThePlainLoop) {
  Projectile p;
  NoGradGuard no_grad;
  Counter c;
  Tensor x0 = scalar_tensor(0.3, DType::Float64);
  Tensor w = scalar_tensor(0.9, DType::Float64);
  Tensor a = checkpoint_loop(c.step(), {x0}, {w}, 17, 3)[0];
  Tensor b = plain_loop(c.step(), {x0}, {w}, 17)[0];
  EXPECT_EQ(a.item<double>(), b.item<double>());
  EXPECT_FALSE(a.requires_grad());
}

// The loop is one custom function's call through the dispatch stack: observers see it by
// name, and compile stops at it by name (a node holds one result, the loop's state is two),
// running it eagerly with the plain loop's gradients.
TEST(CheckpointLoop, IsOneCallOfTheStack) {
  struct Names : detail::OpObserver {
    std::vector<std::string> seen;
    void before_forward_op(const char* op) override { seen.emplace_back(op); }
  } names;
  Projectile a;
  detail::set_op_observer(&names);
  (void)checkpoint_loop(projectile_step, a.state(), a.params(), 5, 2);
  detail::set_op_observer(nullptr);
  ASSERT_FALSE(names.seen.empty());
  EXPECT_EQ(names.seen.front(), "checkpoint_loop");

  auto f = [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{
        miss(checkpoint_loop(projectile_step, {in[0], in[1]}, {in[2], in[3]}, 30, 3))};
  };
  CompileOptions throwing;
  throwing.on_graph_break = OnGraphBreak::Throw;
  throwing.warn = false;
  Projectile b;
  expect_error(
      [&] {
        compile(f, throwing)({b.pos, b.vel, b.drag, b.gravity});
      },
      ErrorKind::NotImplemented, {"checkpoint_loop", "several tensors"});
  CompileOptions eager;
  eager.warn = false;
  CompiledFunction c = compile(f, eager);
  const Tensor y = c({b.pos, b.vel, b.drag, b.gravity})[0];
  const std::vector<Tensor> got = autograd::grad({y}, {b.vel, b.drag, b.gravity});
  const std::vector<Tensor> want = autograd::grad(
      {miss(plain_loop(projectile_step, a.state(), a.params(), 30))}, {a.vel, a.drag, a.gravity});
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same(got[i], want[i])) << i;
}
