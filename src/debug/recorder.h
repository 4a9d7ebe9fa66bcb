// GraphRecorder's state, shared by the recorder, the hooks it puts on nodes and the readers
// (graph_view.cpp). Node pointers are keys only: each record keeps a weak_ptr to check that
// the node it describes is still the one at that address.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "adjoint/autograd.h"
#include "adjoint/debug.h"
#include "autograd/memory_hooks.h"

namespace adjoint {

struct GraphRecorder::Impl {
  /// What the forward left about one node.
  struct NodeRecord {
    std::weak_ptr<Node> node;
    std::string op;  // Op::name ("mul"), empty when the node was only watched
    Tensor value;    // a copy of its output (or, for a leaf, of the leaf) at record time
    int64_t forward_index = -1;
    bool hooked = false;
  };
  /// One node run by the engine.
  struct BackwardStep {
    const Node* node = nullptr;
    std::vector<Tensor> grads_in;  // per output of the node (undefined: no gradient)
    std::vector<Tensor> vjp;       // per next edge; empty when not computed
    std::string vjp_error;         // why not, when the VJP threw
  };

  mutable std::mutex mu;
  std::unordered_map<const Node*, NodeRecord> nodes;
  std::vector<const Node*> forward_order;
  std::vector<BackwardStep> steps;
  std::vector<std::pair<std::weak_ptr<Node>, int>> hook_ids;
  /// The op observer recording forward ops; null once stopped.
  std::unique_ptr<detail::OpObserver> observer;

  /// Hooks every output of `node` (once): see GraphRecorder. `self` is this Impl.
  static void hook(const std::shared_ptr<Impl>& self, const std::shared_ptr<Node>& node);
  /// A leaf's AccumulateGrad: hooked, with a copy of the leaf's value if none yet.
  static void hook_leaf(const std::shared_ptr<Impl>& self, const std::shared_ptr<Node>& acc);
  /// Called by the hook on output `k` of `node` with the gradient reaching it.
  void on_grad(Node* node, uint32_t k, const Tensor& grad);

  /// The record of `n`, fresh when the address held another node before. Hold `mu`.
  NodeRecord& record_for(const std::shared_ptr<Node>& n) {
    NodeRecord& r = nodes[n.get()];
    if (r.node.lock() != n) {
      r = NodeRecord();
      r.node = n;
    }
    return r;
  }
  /// The live record of `n`, or null (unknown, or the address now holds another node).
  const NodeRecord* find(const Node* n) const {
    auto it = nodes.find(n);
    if (it == nodes.end() || it->second.node.lock().get() != n) return nullptr;
    return &it->second;
  }
};

}  // namespace adjoint
