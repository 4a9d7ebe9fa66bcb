// The backward engine. It discovers the graph behind the roots (counting, for every node, how
// many edges point at it), then runs a ready queue ordered by sequence number (latest first),
// summing the gradients that fan in to each node in a per-node buffer. It is iterative, so a
// graph of a million nodes does not touch the stack depth, and it releases each node's saved
// tensors and buffers as soon as the node has run (unless retain_graph).
#include <algorithm>
#include <atomic>
#include <queue>
#include <utility>

#include "adjoint/error.h"
#include "adjoint/ops.h"
#include "adjoint/tensor_impl.h"
#include "autograd/accumulate_grad.h"
#include "autograd/memory_hooks.h"
#include "core/mode_state.h"

namespace adjoint {
namespace {

std::atomic<uint64_t> next_run_id{1};

struct BySequence {
  bool operator()(const Node* a, const Node* b) const {
    return a->sequence_nr() < b->sequence_nr();
  }
};

// Note [Nested backward passes]
// A node's apply may itself run a backward: a checkpointed region's recomputation when the
// region's function calls grad() (src/checkpoint), or a custom function whose backward does.
// That inner pass can reach nodes the outer one is still counting (the graph behind the inner
// pass's inputs). It stashes their run state when it first visits them and puts it back when
// it ends, so the outer pass goes on as if nothing had happened.
thread_local std::vector<uint64_t> tls_active_runs;

// A pass in progress on this thread; when it ends (or throws), the stashed state goes back.
struct ActiveRun {
  explicit ActiveRun(uint64_t run) { tls_active_runs.push_back(run); }
  ~ActiveRun() {
    for (auto& [n, state] : stashed) n->run_ = std::move(state);
    tls_active_runs.pop_back();
  }
  ActiveRun(const ActiveRun&) = delete;
  ActiveRun& operator=(const ActiveRun&) = delete;
  std::vector<std::pair<Node*, Node::RunState>> stashed;
};

bool is_active(uint64_t run) {
  return std::find(tls_active_runs.begin(), tls_active_runs.end(), run) != tls_active_runs.end();
}

// Visits every node reachable from `roots` once, resetting its run state and counting the
// edges that point at it. State of an enclosing pass goes to `stash` (Note [Nested backward
// passes]).
std::vector<Node*> discover(const std::vector<Node*>& roots, uint64_t run,
                            std::vector<std::pair<Node*, Node::RunState>>& stash) {
  std::vector<Node*> order, stack;
  auto visit = [&](Node* n) {
    if (n->run_.run_id == run) return false;
    if (n->run_.run_id != 0 && is_active(n->run_.run_id)) stash.emplace_back(n, std::move(n->run_));
    n->run_ = Node::RunState{run, 0, false, TensorList(n->num_outputs())};
    order.push_back(n);
    return true;
  };
  for (Node* r : roots)
    if (visit(r)) stack.push_back(r);
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.node) continue;
      Node* c = e.node.get();
      if (visit(c)) stack.push_back(c);
      c->run_.dependencies++;
    }
  }
  return order;
}

// Marks the nodes that must run for grad(): those with a capture target strictly behind them.
void mark_needed(const std::vector<Node*>& order, const std::vector<Node*>& targets) {
  auto is_target = [&](const Node* n) {
    return std::find(targets.begin(), targets.end(), n) != targets.end();
  };
  // `order` is a DFS preorder, so children mostly come after parents; iterate in reverse to a
  // fixed point (one pass for trees, a few for graphs with shared subgraphs).
  bool changed = true;
  while (changed) {
    changed = false;
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* n = *it;
      if (n->run_.needed) continue;
      for (const Edge& e : n->next_edges()) {
        if (e.node && (e.node->run_.needed || is_target(e.node.get()))) {
          n->run_.needed = true;
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
  const uint64_t run = next_run_id.fetch_add(1);
  ActiveRun active(run);  // See Note [Nested backward passes]
  std::vector<Node*> root_nodes;
  for (const Edge& e : roots) root_nodes.push_back(e.node.get());
  std::vector<Node*> order = discover(root_nodes, run, active.stashed);
  const bool capturing = !captures.empty();
  if (capturing) {
    std::vector<Node*> targets;
    for (const Capture& c : captures) targets.push_back(c.node);
    mark_needed(order, targets);
  }

  // VJPs may add weight gradients straight into .grad (Note [Adding into .grad in place]).
  autograd::AddIntoGradScope add_into_grad(capturing || create_graph ? 0 : run);

  // Grad mode inside backward is create_graph: VJPs record only when asked to.
  struct GradModeRestore {
    bool prev = tls_mode.grad_enabled;
    ~GradModeRestore() { tls_mode.grad_enabled = prev; }
  } restore;
  tls_mode.grad_enabled = create_graph;
  // Memory timelines see one event per node, not the ops inside it (Note [Op observer]).
  struct ObserverPause {
    detail::OpObserver* observer = std::exchange(detail::tls_op_observer, nullptr);
    ~ObserverPause() { detail::tls_op_observer = observer; }
  } observer_pause;

  std::priority_queue<Node*, std::vector<Node*>, BySequence> ready;
  for (std::size_t i = 0; i < roots.size(); ++i) {
    accumulate(roots[i].node->run_.buffer[roots[i].input_nr], std::move(seeds[i]));
  }
  for (Node* r : root_nodes) {
    if (r->run_.dependencies == 0) {
      r->run_.dependencies = UINT32_MAX;  // queued
      ready.push(r);
    }
  }

  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    TensorList grads = std::move(n->run_.buffer);
    n->run_.buffer.clear();
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
      if (!n->run_.needed || acc) continue;
    }
    TensorList outputs = n->apply(std::move(grads));
    if (!keep_graph) n->release_saved();
    const auto& edges = n->next_edges();
    for (std::size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.node) continue;
      Node* c = e.node.get();
      if (i < outputs.size() && outputs[i].defined())
        accumulate(c->run_.buffer[e.input_nr], std::move(outputs[i]));
      if (--c->run_.dependencies == 0) {
        c->run_.dependencies = UINT32_MAX;
        ready.push(c);
      }
    }
    if (observer_pause.observer) [[unlikely]]
      observer_pause.observer->after_backward_node(n->name());
  }
  // Drop buffers of nodes that never became ready (their branch had no gradient).
  for (Node* n : order) n->run_.buffer.clear();
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

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              std::optional<bool> retain_graph, bool create_graph) {
  std::vector<Edge> roots = root_edges(outputs, "backward");
  std::vector<Tensor> seeds = seeds_for(outputs, grad_outputs, "backward");
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

}  // namespace autograd
}  // namespace adjoint
