// The backward engine. It discovers the graph behind the roots (counting, for every node, how
// many edges point at it), then runs a ready queue ordered by sequence number (latest first),
// summing the gradients that fan in to each node in a per-node buffer. It is iterative, so a
// graph of a million nodes does not touch the stack depth, and it releases each node's saved
// tensors and buffers as soon as the node has run (unless retain_graph).
#include <algorithm>
#include <exception>
#include <functional>
#include <queue>
#include <utility>

#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "adjoint/tensor_impl.h"
#include "autograd/accumulate_grad.h"
#include "autograd/anomaly.h"
#include "autograd/graph_task.h"
#include "autograd/memory_hooks.h"
#include "core/mode_state.h"
#include "dispatch/autocast.h"
#include "dispatch/stack_events.h"

namespace adjoint {
namespace {

using autograd::GraphTask;

struct BySequence {
  bool operator()(const Node* a, const Node* b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

// Note [Concurrent backward]
// All state of a backward run lives in its GraphTask, none on the nodes, so several runs may
// walk the same nodes at once:
// - threads running backward through graphs that share leaves (each AccumulateGrad adds into
//   .grad under its own lock), or that share a subgraph recorded once (with retain_graph, so
//   that no run frees saved tensors another still reads; a node's apply only reads the node);
// - a run nested inside a node's apply (a checkpointed region's recomputation calling grad(),
//   a custom function whose backward runs backward), which may reach nodes of the enclosing
//   run: each run counts and buffers them in its own task.

thread_local uint64_t tls_last_walk_nodes = 0;

// Note [Pruning grad's walk]
// grad() needs only the nodes on paths from its outputs to its inputs. Every node knows the
// length of its longest path to a node without edges (Node::topological_nr, set as its edges
// are made, as PyTorch's topological_nr), and an edge always leads to a smaller number, so a
// node whose number is below every input's cannot lead to any of them: the walk stops there.
// A nested grad() inside a loop (an inner gradient of a descent's current iterate) then walks
// the inner function's nodes, not the loop's whole history, which made s nested steps cost
// O(s^2) (issue 41). backward(), which accumulates into every leaf, walks everything. A node
// whose number is not known (one made by code that does not set it, and every node above it)
// is never skipped.

// Visits every node reachable from `roots` once, counting the edges that point at it; a child
// numbered below `min_topological_nr` is not visited (Note [Pruning grad's walk]).
void discover(GraphTask& task, const std::vector<Node*>& roots, uint32_t min_topological_nr) {
  std::vector<Node*> stack;
  bool fresh = false;
  for (Node* r : roots) {
    task.visit(r, fresh);
    if (fresh) stack.push_back(r);
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.node) continue;
      Node* c = e.node.get();
      if (c->topological_nr() < min_topological_nr) continue;
      const uint32_t i = task.visit(c, fresh);
      if (fresh) stack.push_back(c);
      task.slot(i).dependencies++;
    }
  }
}

// Marks the nodes that must run for grad(): those with a capture target strictly behind them.
void mark_needed(GraphTask& task, const std::vector<Node*>& targets) {
  auto is_target = [&](const Node* n) {
    return std::find(targets.begin(), targets.end(), n) != targets.end();
  };
  // Slots are in DFS preorder, so children mostly come after parents; iterate in reverse to a
  // fixed point (one pass for trees, a few for graphs with shared subgraphs).
  bool changed = true;
  while (changed) {
    changed = false;
    for (std::size_t k = task.size(); k-- > 0;) {
      GraphTask::Slot& s = task.slot(static_cast<uint32_t>(k));
      if (s.needed) continue;
      for (const Edge& e : s.node->next_edges()) {
        if (!e.node) continue;
        const GraphTask::Slot* c = task.find(e.node.get());  // null: pruned, leads nowhere
        if ((c != nullptr && c->needed) || is_target(e.node.get())) {
          s.needed = true;
          changed = true;
          break;
        }
      }
    }
  }
}

void accumulate(Tensor& slot, Tensor g) {
  if (!slot.defined()) {
    slot = std::move(g);
  } else {
    slot = slot + g;
  }
}

// The callback list of the backward run going on on this thread (the innermost, when runs
// nest), or null: where autograd::queue_callback puts a callback.
thread_local std::vector<std::function<void()>>* tls_run_callbacks = nullptr;

class CallbackQueueScope {
 public:
  explicit CallbackQueueScope(std::vector<std::function<void()>>* list)
      : prev_(std::exchange(tls_run_callbacks, list)) {}
  ~CallbackQueueScope() { tls_run_callbacks = prev_; }
  CallbackQueueScope(const CallbackQueueScope&) = delete;
  CallbackQueueScope& operator=(const CallbackQueueScope&) = delete;

 private:
  std::vector<std::function<void()>>* prev_;
};

struct Capture {
  Node* node;
  uint32_t input_nr;
  Tensor grad;
};

// The core: runs backward from `roots` seeded with `seeds`. With `captures` non-empty it
// records the gradient reaching each capture target and runs only what leads to them
// (grad()); otherwise it runs everything, accumulating into leaves (backward()).
void run_backward(const std::vector<Edge>& roots, std::vector<Tensor> seeds, bool keep_graph,
                  bool create_graph, std::vector<Capture>& captures) {
  const bool capturing = !captures.empty();
  // VJPs may add weight gradients straight into .grad (Note [Adding into .grad in place]);
  // grad() never touches .grad, and create_graph records the sum instead.
  // Anomaly mode checks what every node returns, so leaves get theirs through AccumulateGrad.
  const bool check_nan = (tls_mode.anomaly & detail::kAnomalyCheckNan) != 0;
  GraphTask task({keep_graph, create_graph, !capturing && !create_graph && !check_nan});
  std::vector<Node*> root_nodes;
  for (const Edge& e : roots) root_nodes.push_back(e.node.get());
  uint32_t min_topological_nr = 0;
  if (capturing) {
    min_topological_nr = Node::kUnknownTopologicalNr;
    for (const Capture& c : captures)
      min_topological_nr = std::min(min_topological_nr, c.node->topological_nr());
  }
  discover(task, root_nodes, min_topological_nr);
  tls_last_walk_nodes = task.size();
  if (capturing) {
    std::vector<Node*> targets;
    for (const Capture& c : captures) targets.push_back(c.node);
    mark_needed(task, targets);
  }
  // What every node is told about the run (Node::apply): explicit, never read from grad mode.
  const BackwardRun run{create_graph, keep_graph, &task};
  // autograd::queue_callback's list for this run (a run nested in a node has its own).
  std::vector<std::function<void()>> callbacks;
  const CallbackQueueScope callback_scope(&callbacks);

  // Grad mode inside backward is create_graph: the ops VJPs run record only when asked to.
  struct GradModeRestore {
    bool prev = tls_mode.grad_enabled;
    ~GradModeRestore() { tls_mode.grad_enabled = prev; }
  } restore;
  tls_mode.grad_enabled = create_graph;
  // Each op's backward runs in the dtypes its forward left (saved tensors, gradients): never
  // autocast again, even when backward is called inside an Autocast guard.
  detail::AutocastStateScope no_autocast(0);
  // Memory timelines see one event per node, not the ops inside it (Note [Op observer]).
  const detail::OpObserverPause observer_pause;
  detail::OpObserver* const observer = observer_pause.paused;

  std::priority_queue<Node*, std::vector<Node*>, BySequence> ready;
  for (std::size_t i = 0; i < roots.size(); ++i)
    accumulate(task.buffer(*task.find(roots[i].node.get()), roots[i].input_nr),
               std::move(seeds[i]));
  for (Node* r : root_nodes) {
    GraphTask::Slot* s = task.find(r);
    if (s->dependencies == 0 && !s->queued) {
      s->queued = true;
      ready.push(r);
    }
  }

  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    // Slots move when the task grows; it does not grow once discovery is done, but take no
    // reference across apply all the same.
    const GraphTask::Slot self = *task.find(n);
    TensorList grads(n->num_outputs());
    for (uint32_t k = 0; k < n->num_outputs(); ++k) grads[k] = std::move(task.buffer(self, k));
    if (n->has_tensor_pre_hooks()) n->run_tensor_pre_hooks(grads);
    if (capturing) {
      auto* acc = dynamic_cast<AccumulateGrad*>(n);
      bool captured = false;
      for (const Capture& c : captures) captured |= c.node == n;
      // An input leaf's hooks see (and may replace) its gradient, as in backward().
      if (acc && captured) acc->run_hooks(grads[0]);
      for (Capture& c : captures)
        if (c.node == n) accumulate(c.grad, grads[c.input_nr]);
      // grad() never touches .grad, and skips branches that lead to no input.
      if (!self.needed || acc) continue;
    }
    if (observer) [[unlikely]]
      observer->before_backward_node(*n);
    TensorList outputs = n->apply(std::move(grads), run);
    if (observer) [[unlikely]]
      observer->backward_node_tensors(*n, outputs);
    if (check_nan) [[unlikely]]  // Note [Anomaly mode]
      detail::check_node_gradients(*n, outputs);
    if (!keep_graph) n->release_saved();
    const auto& edges = n->next_edges();
    for (std::size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.node) continue;
      GraphTask::Slot* c = task.find(e.node.get());
      if (c == nullptr) continue;  // pruned from grad()'s walk: leads to no input
      if (i < outputs.size() && outputs[i].defined())
        accumulate(task.buffer(*c, e.input_nr), std::move(outputs[i]));
      if (--c->dependencies == 0) {
        c->queued = true;
        ready.push(e.node.get());
      }
    }
    if (observer) [[unlikely]]
      observer->after_backward_node(n->name());
  }
  // Drop buffers of nodes that never became ready (their branch had no gradient).
  task.clear_buffers();
  // End-of-run callbacks, in the order queued; one may queue another (so each is moved out
  // before it runs: the list may grow under it). All run even when one throws (another's
  // owner, a second DDP, must still finish its run); the first error is rethrown after them.
  std::exception_ptr first_error;
  for (std::size_t i = 0; i < callbacks.size(); ++i) {
    const std::function<void()> callback = std::move(callbacks[i]);
    try {
      callback();
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (first_error) std::rethrow_exception(first_error);
}

Tensor seed_for(const Tensor& out, const Tensor& given, std::size_t i, const char* op) {
  if (given.defined()) {
    ADJOINT_CHECK(given.shape() == out.shape(), Shape, op, "gradient ", i, " has shape ",
                  given.shape(), " but output ", i, " has shape ", out.shape());
    return given;
  }
  ADJOINT_CHECK(out.numel() == 1, Autograd, op,
                "grad can be implicitly created only for outputs with one element; output ", i,
                " is ", describe(out), ", so pass its gradient explicitly");
  return ones_like(out);
}

std::vector<Edge> root_edges(const std::vector<Tensor>& outputs, const char* op) {
  std::vector<Edge> roots;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    ADJOINT_CHECK(outputs[i].defined(), Value, op, "output ", i, " is an undefined tensor");
    Edge e = autograd::gradient_edge(outputs[i]);
    ADJOINT_CHECK(e.valid(), Autograd, op, "output ", i, " (", describe(outputs[i]),
                  ") does not require grad and has no grad_fn");
    roots.push_back(std::move(e));
  }
  return roots;
}

std::vector<Tensor> seeds_for(const std::vector<Tensor>& outputs,
                              const std::vector<Tensor>& grad_outputs, const char* op) {
  ADJOINT_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), Value, op, "got ",
                grad_outputs.size(), " gradients for ", outputs.size(), " outputs");
  std::vector<Tensor> seeds;
  for (std::size_t i = 0; i < outputs.size(); ++i)
    seeds.push_back(seed_for(outputs[i], grad_outputs.empty() ? Tensor() : grad_outputs[i], i, op));
  return seeds;
}

}  // namespace

namespace autograd {

uint64_t last_walk_nodes() { return tls_last_walk_nodes; }

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              std::optional<bool> retain_graph, bool create_graph) {
  std::vector<Edge> roots = root_edges(outputs, "backward");
  std::vector<Tensor> seeds = seeds_for(outputs, grad_outputs, "backward");
  // Inside a compiled function the Trace layer takes it: the gradients become ops of the
  // graph and its .grad writes are made at each replay (Note [Calls that are not ops]).
  if (detail::stack_takes_backward(outputs, seeds, create_graph)) [[unlikely]]
    return;
  std::vector<Capture> none;
  run_backward(roots, std::move(seeds), retain_graph.value_or(create_graph), create_graph, none);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, std::optional<bool> retain_graph,
                         bool create_graph, bool allow_unused) {
  std::vector<Edge> roots = root_edges(outputs, "grad");
  std::vector<Tensor> seeds = seeds_for(outputs, grad_outputs, "grad");
  std::vector<Capture> captures;
  std::vector<Edge> input_edges;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    ADJOINT_CHECK(inputs[i].defined(), Value, "grad", "input ", i, " is an undefined tensor");
    ADJOINT_CHECK(inputs[i].requires_grad(), Autograd, "grad", "input ", i, " (",
                  describe(inputs[i]), ") does not require grad");
    input_edges.push_back(gradient_edge(inputs[i]));
    captures.push_back({input_edges.back().node.get(), input_edges.back().input_nr, Tensor()});
  }
  if (!inputs.empty())
    run_backward(roots, std::move(seeds), retain_graph.value_or(create_graph), create_graph,
                 captures);
  std::vector<Tensor> result;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    ADJOINT_CHECK(captures[i].grad.defined() || allow_unused, Autograd, "grad", "input ", i, " (",
                  describe(inputs[i]),
                  ") was not used to compute the outputs; pass allow_unused=true to get an "
                  "undefined gradient for it");
    result.push_back(std::move(captures[i].grad));
  }
  return result;
}

void queue_callback(std::function<void()> callback) {
  ADJOINT_CHECK(tls_run_callbacks != nullptr, Autograd, "queue_callback",
                "called outside a backward run: queue end-of-backward callbacks from a hook or "
                "node that backward() or grad() is running");
  tls_run_callbacks->push_back(std::move(callback));
}

}  // namespace autograd
}  // namespace adjoint
