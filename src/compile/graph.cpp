// Text and dot pictures of a traced graph (docs/compile.md, "Reading a dump").
#include "compile/graph.h"

#include <sstream>

namespace adjoint::detail {
namespace {

std::string type_of(const Value& v) {
  std::ostringstream os;
  os << v.dtype << v.shape;
  return os.str();
}

std::string ref(int id) { return id < 0 ? std::string("_") : "%" + std::to_string(id); }

std::string leaf_name(const Graph& g, int id) {
  const Value& v = g.values[static_cast<std::size_t>(id)];
  return (v.kind == ValueKind::Input ? "input " : "capture ") + std::to_string(v.index);
}

void node_line(std::ostringstream& os, const Graph& g, const GraphNode& n) {
  os << "  ";
  for (std::size_t k = 0; k < n.outputs.size(); ++k) os << (k ? ", " : "") << ref(n.outputs[k]);
  os << " = " << n.op->name() << "(";
  for (std::size_t k = 0; k < n.inputs.size(); ++k) os << (k ? ", " : "") << ref(n.inputs[k]);
  os << ") : " << type_of(g.values[static_cast<std::size_t>(n.outputs[0])]);
  if (n.outputs.size() > 1 && !n.op->fused())
    os << "  (+" << n.outputs.size() - 1 << " saved for backward)";
  if (n.random) os << "  [random]";
  if (n.effect) os << "  [effect]";
  os << "\n" << n.op->body_text("      ");
}

}  // namespace

void Graph::index_results() {
  for (Value& v : values)
    if (v.kind == ValueKind::Result) v.node = -1;  // a dropped node's results have none
  for (std::size_t i = 0; i < nodes.size(); ++i)
    for (std::size_t k = 0; k < nodes[i].outputs.size(); ++k) {
      Value& v = values[static_cast<std::size_t>(nodes[i].outputs[k])];
      v.node = static_cast<int>(i);
      v.index = static_cast<int>(k);
    }
}

std::string graph_to_text(const Graph& g) {
  std::ostringstream os;
  os << "graph(";
  bool first = true;
  for (std::size_t id = 0; id < g.values.size(); ++id) {
    const Value& v = g.values[id];
    if (v.kind != ValueKind::Input && v.kind != ValueKind::Capture) continue;
    os << (first ? "" : ", ") << ref(static_cast<int>(id)) << ": " << type_of(v) << " "
       << leaf_name(g, static_cast<int>(id));
    first = false;
  }
  os << ") {\n";
  for (std::size_t id = 0; id < g.values.size(); ++id)
    if (g.values[id].kind == ValueKind::Constant)
      os << "  " << ref(static_cast<int>(id)) << " = constant : " << type_of(g.values[id]) << "\n";
  for (const GraphNode& n : g.nodes)
    if (!n.backward) node_line(os, g, n);
  os << "  return (";
  for (std::size_t k = 0; k < g.outputs.size(); ++k) os << (k ? ", " : "") << ref(g.outputs[k]);
  os << ")\n}\n";
  if (!g.has_backward()) return os.str();
  os << "backward(";
  first = true;
  for (std::size_t k = 0; k < g.cotangents.size(); ++k) {
    if (g.cotangents[k] < 0) continue;
    os << (first ? "" : ", ") << ref(g.cotangents[k]) << ": cotangent of output " << k;
    first = false;
  }
  os << ") {\n";
  for (const GraphNode& n : g.nodes)
    if (n.backward) node_line(os, g, n);
  os << "  grads: ";
  for (std::size_t k = 0; k < g.grad_leaves.size(); ++k)
    os << (k ? ", " : "") << leaf_name(g, g.grad_leaves[k]) << " <- " << ref(g.grads[k]);
  os << "\n}\n";
  return os.str();
}

std::string graph_to_dot(const Graph& g) {
  std::ostringstream os;
  os << "digraph compiled {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n";
  for (std::size_t id = 0; id < g.values.size(); ++id) {
    const Value& v = g.values[id];
    if (v.kind == ValueKind::Result) continue;
    const char* label = v.kind == ValueKind::Input      ? "input"
                        : v.kind == ValueKind::Capture  ? "capture"
                        : v.kind == ValueKind::Constant ? "constant"
                                                        : "cotangent";
    os << "  v" << id << " [shape=ellipse, label=\"%" << id << " " << label << " " << v.index
       << "\\n"
       << type_of(v) << "\"];\n";
  }
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const GraphNode& n = g.nodes[i];
    os << "  n" << i << " [shape=box, style=filled, fillcolor=\""
       << (n.backward ? "lightpink" : "lightblue") << "\", label=\"" << n.op->name() << "\\n"
       << type_of(g.values[static_cast<std::size_t>(n.outputs[0])]) << "\"];\n";
  }
  // A value's producer: its node, or its own ellipse.
  auto source = [&](int id) {
    const Value& v = g.values[static_cast<std::size_t>(id)];
    return v.kind == ValueKind::Result ? "n" + std::to_string(v.node) : "v" + std::to_string(id);
  };
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (int in : g.nodes[i].inputs)
      if (in >= 0) os << "  " << source(in) << " -> n" << i << ";\n";
  for (std::size_t k = 0; k < g.outputs.size(); ++k)
    os << "  out" << k << " [shape=plaintext, label=\"output " << k << "\"];\n  "
       << source(g.outputs[k]) << " -> out" << k << ";\n";
  for (std::size_t k = 0; k < g.grad_leaves.size(); ++k) {
    if (g.grads[k] < 0) continue;
    os << "  grad" << k << " [shape=plaintext, label=\"grad of " << leaf_name(g, g.grad_leaves[k])
       << "\"];\n  " << source(g.grads[k]) << " -> grad" << k << ";\n";
  }
  os << "}\n";
  return os.str();
}

}  // namespace adjoint::detail
