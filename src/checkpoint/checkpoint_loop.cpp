// checkpoint_loop: a custom function whose forward runs the loop without a graph and whose
// backward reverses it on Griewank's binomial schedule (see Note [Binomial schedule]).
#include "adjoint/checkpoint_loop.h"

#include <map>
#include <memory>

#include "adjoint/autograd.h"
#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "autograd/apply.h"
#include "autograd/transform_support.h"

namespace adjoint {
namespace {

constexpr const char* kOp = "checkpoint_loop";

// Note [Binomial schedule]
// Reversing n steps from a stored state with s free snapshot slots: advance m steps (untaped),
// store that state, reverse the last n - m steps with s - 1 slots, free the slot, reverse the
// first m with s slots. With one step left, tape it (run it with grad and take its VJP); with
// no slot left, re-advance from the stored state for each step. The least number of untaped
// advances, T(n, s), has Griewank's closed form: with beta(c, r) = C(c + r, c) (the most steps
// c slots reverse when no step is advanced more than r times) and r the least integer with
// beta(s + 1, r) >= n, T(n, s) = r n - beta(s + 2, r - 1). A split m reaching it is
// n - beta(s, r - 1) clamped to [max(1, n - beta(s, r)), min(n - 1, beta(s + 1, r - 1))]
// (the tail must fit s slots with r repetitions, the head the same slots with r - 1).
//
// The forward pass must produce the final state untaped anyway, so it stores the states of
// the schedule's first descent (0 -> m1 -> m1 + m2 -> ...) on its way: backward starts with
// those slots full. The same split also minimises that variant's cost; the tests check both
// against dynamic programming.

// C(c + r, c), saturating (only compared with step counts, which are int64).
int64_t beta(int64_t c, int64_t r) {
  if (r < 0) return 0;
  long double b = 1;
  for (int64_t i = 1; i <= r; ++i) {
    b = b * static_cast<long double>(c + i) / static_cast<long double>(i);
    if (b > 4e18L) return INT64_MAX;
  }
  return static_cast<int64_t>(b + 0.5L);
}

int64_t repetitions(int64_t n, int64_t s) {
  int64_t r = 0;
  while (beta(s + 1, r) < n) ++r;
  return r;
}

// T(n, s): untaped advances to reverse n steps from a stored state with s free slots.
int64_t reversal_cost(int64_t n, int64_t s) {
  if (n <= 1) return 0;
  if (s == 0) return n * (n - 1) / 2;
  const int64_t r = repetitions(n, s);
  return r * n - beta(s + 2, r - 1);
}

int64_t binomial_split(int64_t n, int64_t s) {
  const int64_t r = repetitions(n, s);
  const int64_t lo = std::max<int64_t>(1, n - beta(s, r));
  const int64_t hi = std::min<int64_t>(n - 1, beta(s + 1, r - 1));
  return std::max(lo, std::min(hi, n - beta(s, r - 1)));
}

// The positions of the first descent, which the forward pass stores.
std::vector<int64_t> forward_positions(int64_t n, int64_t s) {
  std::vector<int64_t> out;
  int64_t a = 0;
  while (s > 0 && n > 1) {
    const int64_t m = binomial_split(n, s);
    a += m;
    out.push_back(a);
    n -= m;
    --s;
  }
  return out;
}

using State = std::vector<Tensor>;

void check_state(const State& got, const State& like, int64_t i) {
  ADJOINT_CHECK(got.size() == like.size(), Value, kOp, "step ", i, " returned ", got.size(),
                " tensors for a state of ", like.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    ADJOINT_CHECK(got[k].defined(), Value, kOp, "step ", i, " returned an undefined tensor ", k);
    ADJOINT_CHECK(got[k].shape() == like[k].shape() && got[k].dtype() == like[k].dtype(), Shape,
                  kOp, "step ", i, " changed state tensor ", k, " from ", describe(like[k]), " to ",
                  describe(got[k]));
  }
}

// Everything backward needs, shared with the graph node.
struct Loop {
  LoopStep step;
  State initial;                    // detached
  State params;                     // detached
  std::vector<bool> param_needs;    // which params get a gradient
  std::map<int64_t, State> stored;  // the forward's snapshots, consumed by backward
  int64_t steps = 0, free_slots = 0;

  State advance(int64_t from, int64_t to, State x) const {
    NoGradGuard no_grad;
    for (int64_t i = from; i < to; ++i) {
      State next = step(i, x, params);
      check_state(next, x, i);
      x = std::move(next);
    }
    return x;
  }

  // Replaces lambda (the gradient w.r.t. the state after step i) by the one w.r.t. the state
  // before it, and adds step i's parameter gradients to pgrad.
  void taped(int64_t i, const State& x, State& lambda, State& pgrad) const {
    EnableGradGuard grad_on;
    const uint64_t first_seq = detail::next_sequence_nr();
    State xin, pin, wrt;
    for (const Tensor& t : x) {
      Tensor v = detail::detach_alias(t);
      if (is_floating(v.dtype())) v.requires_grad_(true);
      xin.push_back(v);
      if (v.requires_grad()) wrt.push_back(v);
    }
    for (std::size_t j = 0; j < params.size(); ++j) {
      Tensor p = detail::detach_alias(params[j]);
      if (param_needs[j]) {
        p.requires_grad_(true);
        wrt.push_back(p);
      }
      pin.push_back(p);
    }
    State out = step(i, xin, pin);
    check_state(out, x, i);
    State outs, seeds;
    for (std::size_t k = 0; k < out.size(); ++k) {
      if (out[k].requires_grad()) {
        outs.push_back(out[k]);
        seeds.push_back(lambda[k]);
      }
    }
    State own = xin;
    own.insert(own.end(), pin.begin(), pin.end());
    ADJOINT_CHECK(!detail::graph_reaches_outside(outs, own, first_seq), Autograd, kOp, "step ", i,
                  " uses a tensor that requires grad but is not in params: its gradient would be "
                  "lost; pass it through params");
    State g;
    if (!outs.empty() && !wrt.empty()) {
      g = autograd::grad(outs, wrt, seeds, false, false, /*allow_unused=*/true);
    }
    NoGradGuard no_grad;
    std::size_t w = 0;
    for (std::size_t k = 0; k < xin.size(); ++k) {
      if (!xin[k].requires_grad()) continue;
      const Tensor& gk = w < g.size() ? g[w] : Tensor();
      lambda[k] = gk.defined() ? gk : zeros_like(x[k]);
      ++w;
    }
    for (std::size_t j = 0; j < params.size(); ++j) {
      if (!param_needs[j]) continue;
      const Tensor& gj = w < g.size() ? g[w] : Tensor();
      ++w;
      if (!gj.defined()) continue;
      pgrad[j] = pgrad[j].defined() ? pgrad[j] + gj : gj;
    }
  }

  // Reverses steps [a, a + n) given the state before step a, s free slots (Note [Binomial
  // schedule]); a state the forward stored is taken instead of advancing to it.
  void reverse(int64_t a, int64_t n, int64_t s, const State& xa, State& lambda, State& pgrad) {
    if (n == 0) return;
    if (n == 1) return taped(a, xa, lambda, pgrad);
    if (s == 0) {
      for (int64_t i = n - 1; i >= 0; --i) taped(a + i, advance(a, a + i, xa), lambda, pgrad);
      return;
    }
    const int64_t m = binomial_split(n, s);
    {
      State xm;
      if (auto it = stored.find(a + m); it != stored.end()) {
        xm = std::move(it->second);
        stored.erase(it);
      } else {
        xm = advance(a, a + m, xa);
      }
      reverse(a + m, n - m, s - 1, xm, lambda, pgrad);
    }  // the slot is free again
    reverse(a, m, s, xa, lambda, pgrad);
  }
};

}  // namespace

std::vector<Tensor> checkpoint_loop(const LoopStep& step, const std::vector<Tensor>& initial,
                                    const std::vector<Tensor>& params, int64_t steps,
                                    int64_t snapshots) {
  ADJOINT_CHECK(static_cast<bool>(step), Value, kOp, "got an empty step function");
  ADJOINT_CHECK(steps >= 0, Value, kOp, "steps must be >= 0, got ", steps);
  ADJOINT_CHECK(snapshots >= 1, Value, kOp,
                "snapshots must be >= 1 (it counts the initial state), got ", snapshots);
  ADJOINT_CHECK(!initial.empty(), Value, kOp, "the initial state is empty");
  for (std::size_t k = 0; k < initial.size(); ++k)
    ADJOINT_CHECK(initial[k].defined(), Value, kOp, "initial state tensor ", k, " is undefined");
  for (std::size_t j = 0; j < params.size(); ++j)
    ADJOINT_CHECK(params[j].defined(), Value, kOp, "param ", j, " is undefined");

  std::vector<Tensor> inputs = initial;
  inputs.insert(inputs.end(), params.begin(), params.end());
  bool any_grad = false;
  for (const Tensor& t : inputs) any_grad |= t.requires_grad();
  if (steps == 0) return initial;
  if (!any_grad || !is_grad_enabled()) {  // nothing to differentiate: the plain loop
    State x = initial;
    for (int64_t i = 0; i < steps; ++i) {
      State next = step(i, x, params);
      check_state(next, x, i);
      x = std::move(next);
    }
    return x;
  }

  // One custom function's call through the dispatch stack (Note [Custom functions in the
  // stack] in src/autograd/function.cpp): observers see it as checkpoint_loop, and the forward
  // reads the tensors the stack hands it.
  auto loop = std::make_shared<Loop>();
  loop->step = step;
  loop->steps = steps;
  loop->free_slots = snapshots - 1;
  const std::size_t n_state = initial.size();
  detail::CustomFunctionCall call;
  call.name = kOp;
  call.ctx = std::make_shared<FunctionCtx>();
  call.inputs = std::move(inputs);
  call.forward = [loop, n_state, ctx = call.ctx.get()](std::span<const Tensor> in) {
    for (std::size_t k = 0; k < in.size(); ++k) {
      (k < n_state ? loop->initial : loop->params).push_back(detail::detach_alias(in[k]));
      if (k >= n_state) loop->param_needs.push_back(in[k].requires_grad());
    }
    // In-place edits of the inputs before backward still throw.
    ctx->save_for_backward(std::vector<Tensor>(in.begin(), in.end()));
    State x = loop->initial;
    const std::vector<int64_t> positions = forward_positions(loop->steps, loop->free_slots);
    std::size_t next = 0;
    for (int64_t i = 0; i < loop->steps; ++i) {
      if (next < positions.size() && positions[next] == i) {
        loop->stored[i] = x;
        ++next;
      }
      State y = loop->step(i, x, loop->params);
      check_state(y, x, i);
      x = std::move(y);
    }
    // Fresh handles: an output must not alias a stored snapshot or an input.
    State out;
    for (const Tensor& t : x) out.push_back(t.clone());
    return out;
  };
  call.backward = [loop, n_state](FunctionCtx& c, std::vector<Tensor> grads) {
    ADJOINT_CHECK(!is_grad_enabled(), NotImplemented, kOp,
                  "double backward (create_graph) through a checkpointed loop is not supported");
    c.get_saved();  // the version check of the inputs
    State lambda(n_state), pgrad(loop->params.size());
    for (std::size_t k = 0; k < n_state; ++k)
      lambda[k] = grads[k].defined() ? grads[k] : zeros_like(loop->initial[k]);
    loop->reverse(0, loop->steps, loop->free_slots, loop->initial, lambda, pgrad);
    std::vector<Tensor> result;
    for (std::size_t k = 0; k < n_state; ++k)
      result.push_back(c.needs_input_grad(k) ? lambda[k] : Tensor());
    for (std::size_t j = 0; j < pgrad.size(); ++j)
      result.push_back(c.needs_input_grad(n_state + j) ? pgrad[j] : Tensor());
    return result;
  };
  call.why_not = "it returns several tensors, which a node cannot";
  return detail::call_custom_function(std::move(call));
}

CheckpointLoopPlan checkpoint_loop_plan(int64_t steps, int64_t snapshots) {
  ADJOINT_CHECK(steps >= 0, Value, "checkpoint_loop_plan", "steps must be >= 0, got ", steps);
  ADJOINT_CHECK(snapshots >= 1, Value, "checkpoint_loop_plan",
                "snapshots must be >= 1 (it counts the initial state), got ", snapshots);
  CheckpointLoopPlan plan;
  plan.steps = steps;
  plan.snapshots = snapshots;
  plan.taped_steps = steps;
  // Backward runs the recursion with the first descent's states already stored: the split
  // costs nothing, the tail is the same situation one slot down, the head costs T(m, s).
  int64_t n = steps, s = snapshots - 1;
  while (s > 0 && n > 1) {
    const int64_t m = binomial_split(n, s);
    plan.backward_advances += reversal_cost(m, s);
    ++plan.forward_snapshots;
    n -= m;
    --s;
  }
  plan.backward_advances += reversal_cost(n, s);
  return plan;
}

}  // namespace adjoint
