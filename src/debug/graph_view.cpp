// build_view: walks the graph, then lays the recording and the names over it.
#include "debug/graph_view.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <queue>
#include <string_view>
#include <unordered_map>

#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "autograd/accumulate_grad.h"
#include "autograd/apply.h"
#include "autograd/saved_tensor.h"
#include "debug/graph_walk.h"
#include "debug/recorder.h"

namespace adjoint::debug {
namespace {

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

std::string module_prefix(const std::string& name) {
  const std::size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::string() : name.substr(0, dot);
}

}  // namespace

double norm_of(const Tensor& t) {
  double s = 0;
  for (double v : t.to_vector<double>()) s += v * v;
  return std::sqrt(s);
}

std::string shape_text(const Tensor& t) { return adjoint::to_string(t.shape()); }

std::string format_values(const Tensor& t, std::size_t max_values) {
  if (!t.defined()) return "";
  const std::vector<double> v = t.to_vector<double>();
  if (t.dim() == 0 && v.size() == 1) return number(v[0]);
  std::string s = "[";
  const std::size_t shown = std::min(v.size(), max_values);
  for (std::size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + number(v[i]);
  if (shown < v.size())
    s += shown ? ", ...]" : "...]";
  else
    s += "]";
  if (shown < v.size())
    s += " (" + std::to_string(v.size()) + " values, norm " + number(norm_of(t)) + ")";
  return s;
}

GraphView build_view(const std::vector<Tensor>& outputs, const GraphOptions& options,
                     const char* op) {
  const std::vector<Node*> order = graph_nodes(outputs, op);
  GraphView view;
  std::unordered_map<const Node*, std::size_t> index;
  for (Node* n : order) {
    index[n] = view.nodes.size();
    ViewNode v;
    v.node = n;
    v.id = "n" + std::to_string(n->sequence_nr());
    v.backward_name = n->name();
    if (auto* acc = dynamic_cast<AccumulateGrad*>(n)) {
      v.leaf = true;
      v.op = "leaf";
      Tensor leaf(acc->leaf());
      v.shape = shape_text(leaf);
      v.dtype = adjoint::to_string(leaf.dtype());
      v.value = detail::detach_alias(leaf);
      if (options.show_grads && leaf.grad().defined()) v.grad = leaf.grad();
    } else {
      v.op = forward_name(v.backward_name);
    }
    n->visit_saved([&](const SavedTensor& t, const char*, std::size_t) {
      v.num_saved++;
      v.saved_bytes += static_cast<std::size_t>(t.shape().numel()) * itemsize(t.dtype());
      v.saved_freed |= t.released();
    });
    view.nodes.push_back(std::move(v));
  }
  // Output shapes from saved tensors, for graphs no recorder saw: a node's saved output is
  // its own, and a saved input i is the output of the node behind next edge i.
  for (ViewNode& v : view.nodes) {
    const EdgeList& next = v.node->next_edges();
    v.node->visit_saved([&](const SavedTensor& t, const char* role, std::size_t i) {
      ViewNode* owner = nullptr;
      if (std::string_view(role) == "output" && v.node->num_outputs() == 1) owner = &v;
      if (std::string_view(role) == "input" && i < next.size() && next[i].node &&
          next[i].input_nr == 0)
        owner = &view.nodes[index.at(next[i].node.get())];
      if (owner && owner->shape.empty()) {
        owner->shape = adjoint::to_string(t.shape());
        owner->dtype = adjoint::to_string(t.dtype());
      }
    });
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    ViewNode& v = view.nodes[index.at(autograd::gradient_edge(outputs[i]).node.get())];
    if (v.output < 0) v.output = static_cast<int>(i);
    if (!v.value.defined()) v.value = detail::detach_alias(outputs[i]);
    v.shape = shape_text(outputs[i]);
    v.dtype = adjoint::to_string(outputs[i].dtype());
  }
  for (const auto& [name, t] : options.names) {
    if (!t.defined() || !t.requires_grad()) continue;
    auto it = index.find(autograd::gradient_edge(t).node.get());
    if (it != index.end() && view.nodes[it->second].name.empty())
      view.nodes[it->second].name = name;
  }

  // The recording: forward values (more precise than the above), op names, backward steps.
  if (options.recording) {
    const GraphRecorder::Impl& rec = *options.recording->impl();
    std::lock_guard lock(rec.mu);
    for (ViewNode& v : view.nodes) {
      const GraphRecorder::Impl::NodeRecord* r = rec.find(v.node);
      if (!r) continue;
      if (!r->op.empty()) v.op = r->op;
      if (r->value.defined()) {
        v.value = r->value;
        v.shape = shape_text(r->value);
        v.dtype = adjoint::to_string(r->value.dtype());
      }
      v.forward_index = r->forward_index;
    }
    for (const GraphRecorder::Impl::BackwardStep& s : rec.steps) {
      auto it = index.find(s.node);
      if (it == index.end()) continue;  // a node of another graph
      view.nodes[it->second].backward_steps.push_back(view.steps.size());
      view.steps.push_back({it->second, s.grads_in, s.vjp, s.vjp_error});
    }
  }

  // Edges, carrying the producer's value forward and the consumer's last VJP backward.
  for (std::size_t c = 0; c < view.nodes.size(); ++c) {
    const EdgeList& next = view.nodes[c].node->next_edges();
    const ViewNode& consumer = view.nodes[c];
    const ViewStep* last =
        consumer.backward_steps.empty() ? nullptr : &view.steps[consumer.backward_steps.back()];
    for (std::size_t i = 0; i < next.size(); ++i) {
      if (!next[i].node) continue;
      ViewEdge e;
      e.from = index.at(next[i].node.get());
      e.to = c;
      e.input = i;
      if (next[i].input_nr == 0) e.value = view.nodes[e.from].value;
      if (last && i < last->vjp.size()) e.grad = last->vjp[i];
      view.edges.push_back(std::move(e));
    }
  }

  // Modules, for pages too large to show node by node: a named leaf's prefix, passed on to
  // the ops that read it and, failing that, from an op's most recent input.
  for (std::size_t c = 0; c < view.nodes.size(); ++c) {
    ViewNode& v = view.nodes[c];
    if (v.leaf) v.group = module_prefix(v.name);
  }
  std::vector<std::vector<std::size_t>> inputs(view.nodes.size());
  for (const ViewEdge& e : view.edges) inputs[e.to].push_back(e.from);
  for (std::size_t c = 0; c < view.nodes.size(); ++c) {
    ViewNode& v = view.nodes[c];
    if (v.leaf) continue;
    std::size_t latest = SIZE_MAX;
    for (std::size_t from : inputs[c]) {
      const ViewNode& in = view.nodes[from];
      if (in.leaf && !in.group.empty()) v.group = in.group;
      if (!in.leaf && (latest == SIZE_MAX || from > latest)) latest = from;
    }
    if (v.group.empty() && latest != SIZE_MAX) v.group = view.nodes[latest].group;
  }
  // The forward order: inputs before the ops that read them, otherwise creation order. Not
  // creation order alone: a leaf's AccumulateGrad is made when its first consumer is.
  std::vector<std::size_t> pending(view.nodes.size(), 0);
  std::vector<std::vector<std::size_t>> consumers(view.nodes.size());
  for (const ViewEdge& e : view.edges) {
    pending[e.to]++;
    consumers[e.from].push_back(e.to);
  }
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
  for (std::size_t c = 0; c < view.nodes.size(); ++c)
    if (pending[c] == 0) ready.push(c);
  while (!ready.empty()) {
    const std::size_t c = ready.top();
    ready.pop();
    view.forward.push_back(c);
    for (std::size_t to : consumers[c])
      if (--pending[to] == 0) ready.push(to);
  }
  return view;
}

}  // namespace adjoint::debug
