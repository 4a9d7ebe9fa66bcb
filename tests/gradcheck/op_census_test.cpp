// Every op the library applies has samples in the registry, so that the registry-wide tests
// (gradcheck, vmap against the loop, the 16-bit dtypes) cannot miss one: the census of op
// structs (Note [Op census] in src/autograd/op_census.h) against the ops the samples run.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "autograd/apply.h"
#include "autograd/memory_hooks.h"
#include "autograd/op_census.h"
#include "support/registry.h"

namespace adjoint {
namespace {

// The names of the ops a sample runs in its forward, composites' insides included (an op that
// only runs inside another sample's forward is differentiated there).
struct OpNames : detail::OpObserver {
  std::set<std::string> seen;
  void before_forward_op(const char* op) override { seen.insert(op); }
};

// The node names of the graph behind `out`: ops that a sample's forward runs inside a backward
// with create_graph (where observers are paused) leave their nodes there.
void collect_nodes(const Tensor& out, std::set<std::string>& names) {
  std::vector<Node*> todo;
  std::set<Node*> visited;
  if (out.defined() && out.grad_fn()) todo.push_back(out.grad_fn().get());
  while (!todo.empty()) {
    Node* n = todo.back();
    todo.pop_back();
    if (!visited.insert(n).second) continue;
    names.insert(n->name());
    for (const Edge& e : n->next_edges())
      if (e.node) todo.push_back(e.node.get());
  }
}

TEST(OpCensus, FindsTheLibrarysOps) {
  const auto& names = detail::registered_op_names();
  EXPECT_GT(names.size(), 50u);
  const std::set<std::string_view> all(names.begin(), names.end());
  for (const char* op : {"exp", "matmul", "layer_norm", "copy_slices", "alias"})
    EXPECT_TRUE(all.count(op)) << op << " is not in the census";
}

TEST(OpCensus, EveryOpHasSamples) {
  OpNames ops;
  std::set<std::string> nodes;
  for (const testing::OpSample& s : testing::op_registry()) {
    detail::set_op_observer(&ops);
    Tensor out;
    try {
      out = s.fn(s.inputs);
    } catch (...) {
      detail::set_op_observer(nullptr);
      throw;
    }
    detail::set_op_observer(nullptr);
    collect_nodes(out, nodes);
  }
  std::string missing;
  for (std::string_view view : detail::registered_op_names()) {
    const std::string op(view);
    if (!ops.seen.count(op) && !nodes.count(detail::backward_name(op.c_str())))
      missing += (missing.empty() ? "" : ", ") + op;
  }
  EXPECT_TRUE(missing.empty()) << "ops that no sample of the registry runs: " << missing
                               << " (register samples in tests/gradcheck/samples_*.cpp)";
}

}  // namespace
}  // namespace adjoint
