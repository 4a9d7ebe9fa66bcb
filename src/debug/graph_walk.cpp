// graph_nodes and forward_name (graph_walk.h).
#include "debug/graph_walk.h"

#include <algorithm>
#include <cctype>
#include <unordered_set>

#include "adjoint/error.h"

namespace adjoint::debug {

std::vector<Node*> graph_nodes(const std::vector<Tensor>& outputs, const char* op) {
  ADJOINT_CHECK(!outputs.empty(), Value, op, "no outputs given: pass the tensors to draw");
  std::vector<Node*> order, stack;
  std::unordered_set<const Node*> seen;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    ADJOINT_CHECK(outputs[i].defined(), Value, op, "output ", i, " is an undefined tensor");
    Edge e = autograd::gradient_edge(outputs[i]);
    if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
  ADJOINT_CHECK(!stack.empty(), Value, op,
                "the outputs have no autograd graph: no tensor they were computed from "
                "requires grad (or they were computed under NoGradGuard)");
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    order.push_back(n);
    for (const Edge& e : n->next_edges())
      if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
  std::sort(order.begin(), order.end(),
            [](const Node* a, const Node* b) { return a->sequence_nr() < b->sequence_nr(); });
  return order;
}

std::string forward_name(const std::string& node_name) {
  std::string base = node_name;
  const std::string suffix = "Backward";
  if (base.size() > suffix.size() && base.ends_with(suffix))
    base.resize(base.size() - suffix.size());
  std::string out;
  for (std::size_t i = 0; i < base.size(); ++i) {
    const auto c = static_cast<unsigned char>(base[i]);
    if (std::isupper(c)) {
      if (i > 0) out += '_';
      out += static_cast<char>(std::tolower(c));
    } else {
      out += base[i];
    }
  }
  return out;
}

}  // namespace adjoint::debug
