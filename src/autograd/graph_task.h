// GraphTask: everything one backward run knows about the graph it walks (the nodes it reaches,
// how many gradients each still waits for, the gradients summed so far) and the run's options.
// The run owns it; nodes hold none of it, so runs through the same nodes on other threads, or
// nested inside a node's apply, never see each other's state. See Note [Concurrent backward].
#pragma once

#include <cstdint>
#include <vector>

#include "adjoint/autograd.h"

namespace adjoint::autograd {

/// How many nodes the last backward()/grad() run on this thread walked (Note [Pruning grad's
/// walk] in engine.cpp): what tests of the pruned walk read.
uint64_t last_walk_nodes();

class GraphTask {
 public:
  /// One reached node.
  struct Slot {
    Node* node;
    uint32_t dependencies;  ///< edges from nodes of this run that have not run yet
    uint32_t buffer;        ///< index of the gradient of its output 0 in the buffers
    bool needed;            ///< grad(): some capture target lies behind it
    bool queued;            ///< pushed onto the ready queue
    /// A leaf's: a VJP added this run's gradient straight into its .grad (Note [Adding into
    /// .grad in place]), so its AccumulateGrad, which then gets none, still runs the leaf's
    /// post-accumulate hooks. Set through a const slot by the VJP's GradInto.
    mutable bool added_into = false;
  };

  struct Options {
    bool keep_graph = false;    ///< retain_graph: saved tensors survive the run
    bool create_graph = false;  ///< VJPs record (grad mode inside the run)
    /// VJPs may add a leaf's gradient straight into .grad (Note [Adding into .grad in place]).
    bool add_into_grad = false;
  };

  explicit GraphTask(Options options);
  ~GraphTask();
  GraphTask(const GraphTask&) = delete;
  GraphTask& operator=(const GraphTask&) = delete;

  const Options& options() const { return options_; }

  /// The slot of `n`, or null when this run does not reach it. A node this run claimed
  /// answers in a load and two compares; the table is consulted only when the run had to
  /// share a node with another live run.
  Slot* find(const Node* n) {
    const uint64_t claim = n->graph_task_claim().load(std::memory_order_acquire);
    const auto i = static_cast<uint32_t>(claim);
    if ((claim >> 32) == serial_ && i < slots_.size() && slots_[i].node == n) [[likely]]
      return &slots_[i];
    return table_entries_ != 0 ? find_in_table(n) : nullptr;
  }
  const Slot* find(const Node* n) const { return const_cast<GraphTask*>(this)->find(n); }
  /// The slot index of `n`, making a fresh slot on the first visit (`fresh` says which).
  uint32_t visit(Node* n, bool& fresh);

  Slot& slot(uint32_t i) { return slots_[i]; }
  std::size_t size() const { return slots_.size(); }
  /// The gradient summed so far for output `output_nr` of the node in `s`.
  Tensor& buffer(const Slot& s, uint32_t output_nr) { return buffers_[s.buffer + output_nr]; }
  const Tensor& buffer(const Slot& s, uint32_t output_nr) const {
    return buffers_[s.buffer + output_nr];
  }
  /// Drops every gradient still buffered (nodes whose branch got none never ran).
  void clear_buffers() { buffers_.clear(); }

 private:
  Slot* find_in_table(const Node* n);
  uint32_t add_slot(Node* n);
  uint32_t add_to_table(Node* n);
  void grow_table();

  Options options_;
  // This run's serial, registered as live (Note [Graph task claims]); 0 when registration
  // failed and every node goes through the table.
  uint32_t serial_ = 0;
  std::vector<Slot> slots_;
  std::vector<Tensor> buffers_;  // every reached node's input gradients, in one block
  // The nodes this run could not claim because a live run holds them: open addressing from
  // node address to slot index + 1 (0: empty), at most half full. Empty in a lone run.
  std::vector<uint32_t> table_;
  std::size_t table_entries_ = 0;
};

}  // namespace adjoint::autograd
