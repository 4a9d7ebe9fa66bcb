// The passes over a traced graph (docs/compile.md, "Passes").
#include "compile/passes.h"

#include "adjoint/allocator.h"
#include "compile/fusion.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <utility>

namespace adjoint::detail {
namespace {

/// Replaces every use of a value by replacement[value].
void rename_uses(Graph& g, const std::vector<int>& replacement) {
  auto fix = [&](int& id) {
    if (id >= 0) id = replacement[static_cast<std::size_t>(id)];
  };
  for (GraphNode& n : g.nodes)
    for (int& id : n.inputs) fix(id);
  for (int& id : g.outputs) fix(id);
  for (int& id : g.grads) fix(id);
}

/// Removes the nodes not marked live, keeping the values (ids stay valid).
void keep_nodes(Graph& g, const std::vector<bool>& live) {
  std::vector<GraphNode> kept;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (live[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  g.index_results();
}

/// For each value, the step of `schedule` that uses it last (-1: none).
std::vector<int> last_uses(const Graph& g, const std::vector<int>& nodes) {
  std::vector<int> last(g.values.size(), -1);
  for (std::size_t step = 0; step < nodes.size(); ++step)
    for (int id : g.nodes[static_cast<std::size_t>(nodes[step])].inputs)
      if (id >= 0) last[static_cast<std::size_t>(id)] = static_cast<int>(step);
  return last;
}

Schedule schedule(const Graph& g, bool backward, const std::vector<bool>& keep) {
  Schedule s;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].backward == backward) s.nodes.push_back(static_cast<int>(i));
  s.drop.resize(s.nodes.size());
  const std::vector<int> last = last_uses(g, s.nodes);
  for (std::size_t id = 0; id < last.size(); ++id)
    if (last[id] >= 0 && !keep[id]) s.drop[static_cast<std::size_t>(last[id])].push_back(id);
  // A result nothing reads (an op's saved tensors no backward needs) goes right away.
  for (std::size_t step = 0; step < s.nodes.size(); ++step)
    for (int id : g.nodes[static_cast<std::size_t>(s.nodes[step])].outputs)
      if (last[static_cast<std::size_t>(id)] < 0 && !keep[static_cast<std::size_t>(id)])
        s.drop[step].push_back(id);
  return s;
}

std::size_t value_bytes(const Value& v) {
  return adjoint::detail::block_bytes(static_cast<std::size_t>(v.shape.numel()) *
                                      itemsize(v.dtype));
}

// Replays a schedule's allocations: each result takes its size class when its node runs (a
// view takes nothing and holds its base), and gives it back when it and every view of it
// have been let go, as run_kernels does.
std::size_t predicted_peak(const Graph& g, const Schedule& s,
                           const std::vector<int>& handed_over = {}) {
  // `handed_over`: values made before the run that it owns and frees after their last reader
  // (what the forward kept for the backward).
  std::vector<bool> made_here(g.values.size(), false);
  for (int id : handed_over) made_here[static_cast<std::size_t>(id)] = true;
  for (int n : s.nodes)
    for (int id : g.nodes[static_cast<std::size_t>(n)].outputs)
      made_here[static_cast<std::size_t>(id)] = true;
  auto owner = [&](int id) {
    while (g.values[static_cast<std::size_t>(id)].alias_of >= 0)
      id = g.values[static_cast<std::size_t>(id)].alias_of;
    return id;
  };
  std::vector<int> holders(g.values.size(), 0);
  for (int id : handed_over) ++holders[static_cast<std::size_t>(id)];
  // Bytes above those held when the run starts (negative once it freed what it was handed).
  int64_t live = 0, peak = 0;
  for (std::size_t step = 0; step < s.nodes.size(); ++step) {
    for (int id : g.nodes[static_cast<std::size_t>(s.nodes[step])].outputs) {
      const int root = owner(id);
      if (!made_here[static_cast<std::size_t>(root)]) continue;
      if (root == id)
        live += static_cast<int64_t>(value_bytes(g.values[static_cast<std::size_t>(id)]));
      ++holders[static_cast<std::size_t>(root)];
    }
    peak = std::max(peak, live);
    for (int id : s.drop[step]) {
      const int root = owner(id);
      if (made_here[static_cast<std::size_t>(root)] &&
          --holders[static_cast<std::size_t>(root)] == 0)
        live -= value_bytes(g.values[static_cast<std::size_t>(root)]);
    }
  }
  return peak;
}

// Renumbers the values that are still used densely, so that a run's table of values (one
// slot each) holds no dead ones: a chain of 3000 fused ops leaves a handful of 6000.
void compact_values(Graph& g) {
  std::vector<int> new_id(g.values.size(), -1);
  std::vector<Value> kept;
  auto keep = [&](int& id) {
    if (id < 0) return;
    if (new_id[static_cast<std::size_t>(id)] < 0) {
      new_id[static_cast<std::size_t>(id)] = static_cast<int>(kept.size());
      kept.push_back(g.values[static_cast<std::size_t>(id)]);
    }
    id = new_id[static_cast<std::size_t>(id)];
  };
  for (int& id : g.inputs) keep(id);
  for (std::size_t id = 0; id < g.values.size(); ++id) {  // bound by index at every run
    const ValueKind k = g.values[id].kind;
    int i = static_cast<int>(id);
    if (k == ValueKind::Capture || k == ValueKind::Constant || k == ValueKind::Cotangent) keep(i);
  }
  for (GraphNode& n : g.nodes) {
    for (int& id : n.inputs) keep(id);
    for (int& id : n.outputs) keep(id);
  }
  for (int& id : g.outputs) keep(id);
  for (int& id : g.grads) keep(id);
  for (int& id : g.grad_leaves) keep(id);
  for (int& id : g.cotangents) keep(id);
  for (Value& v : kept)
    if (v.alias_of >= 0) v.alias_of = new_id[static_cast<std::size_t>(v.alias_of)];
  g.values = std::move(kept);
  g.index_results();
}

}  // namespace

int eliminate_common_subexpressions(Graph& g) {
  std::vector<int> replacement(g.values.size());
  std::iota(replacement.begin(), replacement.end(), 0);
  // Candidates by (op name, inputs); names are the ops' static strings, compared by content.
  std::map<std::pair<std::string, std::vector<int>>, std::vector<int>> seen;
  int merged = 0;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    GraphNode& n = g.nodes[i];
    for (int& id : n.inputs)
      if (id >= 0) id = replacement[static_cast<std::size_t>(id)];
    if (n.pinned()) continue;
    std::vector<int>& same_key = seen[{n.op->name(), n.inputs}];
    bool found = false;
    for (int j : same_key) {
      const GraphNode& m = g.nodes[static_cast<std::size_t>(j)];
      if (m.outputs.size() != n.outputs.size() || !n.op->same_as(*m.op)) continue;
      for (std::size_t k = 0; k < n.outputs.size(); ++k)
        replacement[static_cast<std::size_t>(n.outputs[k])] = m.outputs[k];
      found = true;
      ++merged;
      break;
    }
    if (!found) same_key.push_back(static_cast<int>(i));
  }
  rename_uses(g, replacement);
  return merged;
}

int eliminate_dead_code(Graph& g) {
  std::vector<bool> needed(g.values.size(), false);
  for (int id : g.outputs)
    if (id >= 0) needed[static_cast<std::size_t>(id)] = true;
  for (int id : g.grads)
    if (id >= 0) needed[static_cast<std::size_t>(id)] = true;
  std::vector<bool> live(g.nodes.size(), false);
  for (std::size_t i = g.nodes.size(); i-- > 0;) {
    const GraphNode& n = g.nodes[i];
    bool any = n.pinned();
    for (int id : n.outputs) any = any || needed[static_cast<std::size_t>(id)];
    if (!any) continue;
    live[i] = true;
    for (int id : n.inputs)
      if (id >= 0) needed[static_cast<std::size_t>(id)] = true;
  }
  const int dropped = static_cast<int>(std::count(live.begin(), live.end(), false));
  keep_nodes(g, live);
  return dropped;
}

Plan make_plan(Graph traced, const CompileOptions& options) {
  Plan p;
  p.nodes_traced = static_cast<int>(traced.nodes.size());
  if (options.eliminate_common_subexpressions) p.merged = eliminate_common_subexpressions(traced);
  if (options.eliminate_dead_code) p.dropped = eliminate_dead_code(traced);
  if (options.recompute_pointwise && traced.has_backward()) {
    p.recomputed = recompute_pointwise(traced);
    // The forward values only the backward read, and now computes itself, go.
    if (options.eliminate_dead_code) p.dropped += eliminate_dead_code(traced);
  }
  if (options.fuse_pointwise) p.fused = fuse_pointwise(traced);
  compact_values(traced);
  p.graph = std::move(traced);
  const Graph& g = p.graph;

  // The forward keeps its outputs and what the backward reads of it; the backward keeps the
  // gradients it returns.
  std::vector<bool> keep_forward(g.values.size(), false), keep_backward(g.values.size(), false);
  for (int id : g.outputs)
    if (id >= 0) keep_forward[static_cast<std::size_t>(id)] = true;
  std::vector<bool> is_saved(g.values.size(), false);
  auto save = [&](int id) {  // a forward result the backward reads or returns
    if (id < 0 || is_saved[static_cast<std::size_t>(id)]) return;
    const Value& v = g.values[static_cast<std::size_t>(id)];
    if (v.kind != ValueKind::Result || g.nodes[static_cast<std::size_t>(v.node)].backward) return;
    is_saved[static_cast<std::size_t>(id)] = keep_forward[static_cast<std::size_t>(id)] = true;
    p.saved.push_back(id);
  };
  for (const GraphNode& n : g.nodes)
    if (n.backward)
      for (int id : n.inputs) save(id);
  for (int id : g.grads) {
    if (id >= 0) keep_backward[static_cast<std::size_t>(id)] = true;
    save(id);
  }
  p.capture_ids.assign(g.captures.size(), -1);
  p.constant_ids.assign(g.constants.size(), -1);
  for (std::size_t id = 0; id < g.values.size(); ++id) {
    const Value& v = g.values[id];
    if (v.kind == ValueKind::Capture)
      p.capture_ids[static_cast<std::size_t>(v.index)] = static_cast<int>(id);
    if (v.kind == ValueKind::Constant)
      p.constant_ids[static_cast<std::size_t>(v.index)] = static_cast<int>(id);
  }
  for (const GraphNode& n : g.nodes)
    for (int id : n.inputs) {
      if (id < 0) continue;
      // A fused node's further outputs are results, which it hands out when it runs through
      // the stack too; other nodes' are what their forward saved.
      const Value& v = g.values[static_cast<std::size_t>(id)];
      if (v.kind != ValueKind::Result || v.index == 0) continue;
      const GraphNode& maker = g.nodes[static_cast<std::size_t>(v.node)];
      if (maker.op->fused()) continue;
      if (!n.backward)
        p.forward_reads_saved = true;
      else if (maker.backward)
        p.backward_reads_saved = true;
    }
  p.forward = schedule(g, false, keep_forward);
  p.backward = schedule(g, true, keep_backward);
  p.forward_peak_bytes = predicted_peak(g, p.forward);
  // The backward owns the kept values that are not also outputs (the caller holds those).
  std::vector<int> handed_over;
  for (int id : p.saved)
    if (std::find(g.outputs.begin(), g.outputs.end(), id) == g.outputs.end())
      handed_over.push_back(id);
  p.backward_peak_bytes = predicted_peak(g, p.backward, handed_over);
  for (int id : p.saved) p.saved_bytes += value_bytes(g.values[static_cast<std::size_t>(id)]);
  return p;
}

}  // namespace adjoint::detail
