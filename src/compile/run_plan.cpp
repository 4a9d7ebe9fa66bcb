// Running a planned graph (run_plan.h).
#include "compile/run_plan.h"

#include <algorithm>

#include "adjoint/autograd.h"
#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/ops.h"
#include "autograd/apply.h"
#include "autograd/forward_ad.h"
#include "autograd/memory_hooks.h"
#include "autograd/saved_tensor.h"
#include "vmap/batched.h"

namespace adjoint::detail {

// Note [Compiled backward]
// A replay with gradients runs the forward kernels without recording anything and gives the
// outputs one node, CompiledFunctionBackward, whose edges lead to the arguments and captured
// tensors that require grad, exactly where the eager ops' edges would have led. Hooks on those
// tensors, .grad accumulation and retain_graph therefore keep their meaning: the engine sees
// one node instead of many. Its apply runs the traced backward graph on the values the forward
// kept (SavedTensors, so saved-tensor hooks, memory accounting and the check that nothing was
// changed in place apply to them as to any node's), the cotangents, and the leaves.
//
// A backward with create_graph must record the ops of the backward for a second derivative,
// and the kept values have no history of their own. That run therefore goes back to eager
// code: it runs the function again on the saved arguments (which records it), and
// differentiates that with create_graph; the double backward then runs through ordinary
// nodes, exactly as without compile.
//
// Cotangents that a transform acts on (batched by vmap, as jacrev's one-hot rows are, or
// carrying jvp tangents) cannot go through the kernels, which know nothing of batch dims or
// tangents: a kernel would read a batched cotangent's memory as if it were one example (a
// traced transpose then viewed the batch's first row for every row). That run goes op by op
// through the dispatch stack, as a transformed forward does, so every op's batching and JVP
// rules apply. A backward graph whose ops read what other backward ops saved cannot go
// through the stack (which does not hand those out); it runs eagerly, as with create_graph.

namespace {

/// Binds the arguments, captured tensors and constants of a run.
void bind_leaves(const Plan& plan, std::vector<Tensor>& env, const std::vector<Tensor>& inputs,
                 const std::vector<Tensor>& captures) {
  const Graph& g = plan.graph;
  for (std::size_t i = 0; i < g.inputs.size(); ++i)
    if (g.inputs[i] >= 0) env[static_cast<std::size_t>(g.inputs[i])] = inputs[i];
  for (std::size_t i = 0; i < plan.capture_ids.size(); ++i)
    env[static_cast<std::size_t>(plan.capture_ids[i])] = captures[i];
  for (std::size_t i = 0; i < plan.constant_ids.size(); ++i)
    env[static_cast<std::size_t>(plan.constant_ids[i])] = g.constants[i];
}

/// Each result of a replayed op has the shape and dtype its graph records, before any later op
/// reads it: the ops after it were checked against those (an imported file's shape pass,
/// Note [Checking an imported graph] in src/export/import.cpp), and their kernels trust them.
void check_recorded(const Graph& g, const GraphNode& n, std::size_t k, const Tensor& t) {
  if (!t.defined() || batch_level(t) != 0) return;  // (under vmap: a batch of them)
  const Value& v = g.values[static_cast<std::size_t>(n.outputs[k])];
  ADJOINT_CHECK(t.shape() == v.shape && t.dtype() == v.dtype, Shape, n.op->name(), "result ", k,
                " is a ", t.dtype(), " tensor of shape ", t.shape(), ", the graph records a ",
                v.dtype, " value of shape ", v.shape, " (value ", n.outputs[k], ")");
}

/// Runs a schedule's kernels over env. The kernels run below the dispatch stack, so an
/// installed observer (a profile, a memory timeline: Note [Op observer] in
/// src/dispatch/op_observer.cpp) is told about each node here, by the Observe layer's own
/// observe_op, under the node's name ("linear", "fused[mul, add, tanh]"). The backward's replay
/// runs inside one node of the engine, which reports that node and silences the observer while
/// it runs.
void run_kernels(const Graph& g, const Schedule& s, std::vector<Tensor>& env) {
  OpObserver* const observer = tls_op_observer;
  std::vector<Tensor> args, extras;
  for (std::size_t step = 0; step < s.nodes.size(); ++step) {
    const GraphNode& n = g.nodes[static_cast<std::size_t>(s.nodes[step])];
    args.clear();
    for (int id : n.inputs) args.push_back(id >= 0 ? env[static_cast<std::size_t>(id)] : Tensor());
    Tensor& out = env[static_cast<std::size_t>(n.outputs[0])];
    if (observer) [[unlikely]] {
      out =
          observe_op(*observer, n.op->name(), args, [&] { return n.op->run_kernel(args, extras); });
    } else {
      out = n.op->run_kernel(args, extras);
    }
    ADJOINT_CHECK(extras.size() + 1 == n.outputs.size(), Internal, n.op->name(),
                  "compile: the op saved ", extras.size(), " tensors when replayed, ",
                  n.outputs.size() - 1, " when traced");
    check_recorded(g, n, 0, out);
    for (std::size_t k = 0; k < extras.size(); ++k) {
      check_recorded(g, n, k + 1, extras[k]);
      env[static_cast<std::size_t>(n.outputs[k + 1])] = std::move(extras[k]);
    }
    for (int id : s.drop[step]) env[static_cast<std::size_t>(id)] = Tensor();
  }
}

/// Runs a schedule op by op through the dispatch stack over env, so that every transform
/// that is on (vmap, jvp, recording for backward) sees each op.
void run_dispatched(const Graph& g, const Schedule& s, std::vector<Tensor>& env) {
  std::vector<Tensor> args, extras;
  for (std::size_t step = 0; step < s.nodes.size(); ++step) {
    const GraphNode& n = g.nodes[static_cast<std::size_t>(s.nodes[step])];
    args.clear();
    for (int id : n.inputs) args.push_back(id >= 0 ? env[static_cast<std::size_t>(id)] : Tensor());
    Tensor out = n.op->run_dispatched(args, extras);
    check_recorded(g, n, 0, out);
    env[static_cast<std::size_t>(n.outputs[0])] = std::move(out);
    for (std::size_t k = 0; k < extras.size() && k + 1 < n.outputs.size(); ++k) {
      check_recorded(g, n, k + 1, extras[k]);
      env[static_cast<std::size_t>(n.outputs[k + 1])] = std::move(extras[k]);
    }
    for (int id : s.drop[step]) env[static_cast<std::size_t>(id)] = Tensor();
  }
}

/// The caller's tensor behind a leaf value (an argument or a captured tensor).
const Tensor& leaf_tensor(const Graph& g, int id, const std::vector<Tensor>& inputs) {
  const Value& v = g.values[static_cast<std::size_t>(id)];
  return v.kind == ValueKind::Input ? inputs[static_cast<std::size_t>(v.index)]
                                    : g.captures[static_cast<std::size_t>(v.index)];
}

class CompiledBackward final : public Node {
 public:
  CompiledBackward(std::shared_ptr<const Plan> plan, EagerFn eager,
                   const std::vector<Tensor>& inputs, const std::vector<Tensor>& env,
                   const std::vector<Tensor>& outputs)
      : Node(static_cast<uint32_t>(outputs.size())),
        plan_(std::move(plan)),
        eager_(std::move(eager)) {
    const Graph& g = plan_->graph;
    for (int id : plan_->saved) saved_.emplace_back(env[static_cast<std::size_t>(id)], false);
    for (const Tensor& x : inputs) inputs_.emplace_back(x, false);
    for (const Tensor& c : g.captures) captures_.emplace_back(c, false);
    for (int id : g.grad_leaves)
      next_edges_.push_back(autograd::gradient_edge(leaf_tensor(g, id, inputs)));
    update_topological_nr();
    for (const Tensor& o : outputs)
      outputs_.push_back(o.defined() ? InputInfo{o.shape(), o.dtype()} : InputInfo{});
  }

  std::string name() const override { return "CompiledFunctionBackward"; }

  TensorList apply(TensorList&& grads, const BackwardRun& run) override {
    auto self = shared_from_this();
    const Graph& g = plan_->graph;
    std::vector<Tensor> inputs;
    for (const SavedTensor& s : inputs_) inputs.push_back(s.defined() ? s.unpack(self) : Tensor());
    std::vector<Tensor> captures;
    for (const SavedTensor& s : captures_) captures.push_back(s.unpack(self));
    TensorList result(next_edges_.size());
    const bool transformed_grads = transformed(grads, nullptr);
    if (run.create_graph || (transformed_grads && plan_->backward_reads_saved)) {
      eager_backward(grads, inputs, result, run.create_graph);
    } else {
      std::vector<Tensor> env(g.values.size());
      bind_leaves(*plan_, env, inputs, captures);
      for (std::size_t i = 0; i < plan_->saved.size(); ++i)
        env[static_cast<std::size_t>(plan_->saved[i])] = saved_[i].unpack(self);
      // Without retain_graph the run owns them now, and lets each go after its last reader,
      // as eager nodes free theirs one by one.
      if (!run.retain_graph)
        for (SavedTensor& st : saved_) st.release();
      for (std::size_t k = 0; k < g.cotangents.size(); ++k) {
        const int c = g.cotangents[k];
        if (c < 0) continue;
        env[static_cast<std::size_t>(c)] =
            grads[k].defined() ? grads[k] : zeros(outputs_[k].shape, outputs_[k].dtype);
      }
      if (transformed_grads)
        run_dispatched(g, plan_->backward, env);
      else
        run_kernels(g, plan_->backward, env);
      for (std::size_t k = 0; k < result.size(); ++k)
        if (next_edges_[k].valid() && g.grads[k] >= 0)
          result[k] = env[static_cast<std::size_t>(g.grads[k])];
    }
    return result;
  }

  void release_saved() override {
    for (SavedTensor& s : saved_) s.release();
    for (SavedTensor& s : inputs_) s.release();
    for (SavedTensor& s : captures_) s.release();
  }

  void visit_saved(const SavedVisitor& visit) const override {
    for (std::size_t i = 0; i < saved_.size(); ++i)
      if (saved_[i].defined()) visit(saved_[i], "saved", i);
  }

 private:
  // Note [Compiled backward]: replays the forward with recording and differentiates it (with
  // create_graph as the engine's run asks; the engine runs a node with grad mode off unless
  // it records, and the replay must record all the same).
  void eager_backward(const TensorList& grads, const std::vector<Tensor>& inputs,
                      TensorList& result, bool create_graph) const {
    const Graph& g = plan_->graph;
    const std::vector<Tensor> outs = [&] {
      EnableGradGuard record;
      return eager_(inputs);
    }();
    std::vector<Tensor> roots, root_grads, leaves;
    std::vector<std::size_t> leaf_slot;
    for (std::size_t k = 0; k < outs.size(); ++k) {
      if (g.cotangents[k] < 0 || !outs[k].defined() || !outs[k].requires_grad()) continue;
      roots.push_back(outs[k]);
      root_grads.push_back(grads[k].defined() ? grads[k] : zeros_like(outs[k]));
    }
    for (std::size_t k = 0; k < g.grad_leaves.size(); ++k) {
      const Tensor& leaf = leaf_tensor(g, g.grad_leaves[k], inputs);
      if (!next_edges_[k].valid() || !leaf.requires_grad()) continue;
      leaves.push_back(leaf);
      leaf_slot.push_back(k);
    }
    if (roots.empty() || leaves.empty()) return;
    const std::vector<Tensor> gs =
        autograd::grad(roots, leaves, root_grads, create_graph, create_graph, true);
    for (std::size_t i = 0; i < gs.size(); ++i) result[leaf_slot[i]] = gs[i];
  }

  std::shared_ptr<const Plan> plan_;
  EagerFn eager_;
  std::vector<SavedTensor> saved_;     ///< by plan_->saved
  std::vector<SavedTensor> inputs_;    ///< the caller's arguments
  std::vector<SavedTensor> captures_;  ///< the captured tensors, as they were
  std::vector<InputInfo> outputs_;     ///< shapes and dtypes of the outputs
};

}  // namespace

namespace {

// The function's results from the values of a run: a result the function detached from an
// argument or a capture (Graph::output_detached) is detached again, so that no gradient flows
// into the leaf through it and it is not the caller's own tensor.
std::vector<Tensor> results_of(const Graph& g, const std::vector<Tensor>& env) {
  std::vector<Tensor> outs;
  outs.reserve(g.outputs.size());
  for (std::size_t k = 0; k < g.outputs.size(); ++k) {
    const int id = g.outputs[k];
    Tensor out = id >= 0 ? env[static_cast<std::size_t>(id)] : Tensor();
    if (k < g.output_detached.size() && g.output_detached[k] && out.defined() &&
        out.requires_grad())
      out = detail::detach_alias(out);
    outs.push_back(std::move(out));
  }
  return outs;
}

}  // namespace

std::vector<Tensor> run_plan(const std::shared_ptr<const Plan>& plan,
                             const std::vector<Tensor>& inputs, EagerFn eager) {
  const Graph& g = plan->graph;
  std::vector<Tensor> env(g.values.size());
  bind_leaves(*plan, env, inputs, g.captures);
  run_kernels(g, plan->forward, env);
  std::vector<Tensor> outs = results_of(g, env);

  bool differentiable = false;
  if (g.has_backward() && is_grad_enabled())
    for (int id : g.grad_leaves) differentiable |= leaf_tensor(g, id, inputs).requires_grad();
  if (!differentiable) return outs;
  // Each output that the backward differentiates gets a handle of its own (an output may be
  // an argument, or appear twice) carrying the node's history.
  for (std::size_t k = 0; k < outs.size(); ++k)
    if (g.cotangents[k] >= 0) outs[k] = alias_without_history(outs[k]);
  auto node = std::make_shared<CompiledBackward>(plan, std::move(eager), inputs, env, outs);
  for (std::size_t k = 0; k < outs.size(); ++k)
    if (g.cotangents[k] >= 0) set_history(outs[k], node, static_cast<uint32_t>(k));
  return outs;
}

namespace {

/// Whether a gradient value of a replay may become a tensor's .grad as it is: not when its
/// memory is a constant of the graph (the next replay reads it again) or a captured tensor's,
/// nor when another .grad of this replay already took it (CSE can give two parameters one
/// value), since .grad is accumulated into in place.
bool may_own(const Graph& g, const Tensor& value, const std::vector<const StorageImpl*>& taken) {
  const StorageImpl* s = value.impl()->storage.get();
  if (std::ranges::find(taken, s) != taken.end()) return false;
  for (const Tensor& c : g.constants)
    if (c.impl()->storage.get() == s) return false;
  for (const Tensor& c : g.captures)
    if (c.impl()->storage.get() == s) return false;
  return true;
}

}  // namespace

void write_back(const Graph& g, const std::vector<Tensor>& inputs, std::vector<Tensor>& outs) {
  const std::size_t first = g.function_outputs();
  NoGradGuard no_grad;
  std::vector<const StorageImpl*> taken;  // the storages given to a .grad by this replay
  for (std::size_t i = 0; i < g.writes.size(); ++i) {
    const LeafWrite& w = g.writes[i];
    const auto index = static_cast<std::size_t>(w.index);
    Tensor target = w.kind == ValueKind::Input ? inputs[index] : g.captures[index];
    const Tensor& value = outs[first + i];
    if (!w.grad) {
      target.copy_(value);  // bumps its version, as the eager write did
      continue;
    }
    // A gradient (Note [Training steps under compile] in trace.cpp): into the .grad the
    // tensor holds where it can take it, as accumulation would, else set.
    Tensor held = target.grad();
    if (value.defined() && held.defined() && held.shape() == value.shape() &&
        held.dtype() == value.dtype()) {
      held.copy_(value);
    } else if (!value.defined() || may_own(g, value, taken)) {
      target.set_grad(value);
      if (value.defined()) taken.push_back(value.impl()->storage.get());
    } else {
      target.set_grad(value.clone());
    }
  }
  outs.resize(first);
}

bool transformed(std::span<const Tensor> inputs, const Graph* g) {
  for (const Tensor& x : inputs)
    if (batch_level(x) != 0 || (tls_mode.dual_visible != 0 && has_visible_tangent(x))) return true;
  if (g && tls_mode.dual_visible != 0)
    for (const Tensor& c : g->captures)
      if (has_visible_tangent(c)) return true;
  return false;
}

std::vector<Tensor> run_plan_dispatched(const Plan& plan, const std::vector<Tensor>& inputs) {
  const Graph& g = plan.graph;
  std::vector<Tensor> env(g.values.size());
  bind_leaves(plan, env, inputs, g.captures);
  run_dispatched(g, plan.forward, env);
  return results_of(g, env);
}

}  // namespace adjoint::detail
