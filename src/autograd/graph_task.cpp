// GraphTask's node index: a small open-addressing table from node address to slot, so that a
// run finds a node's state in a few instructions without a per-node allocation.
#include "autograd/graph_task.h"

namespace adjoint::autograd {
namespace {

thread_local const GraphTask* tls_current_task = nullptr;

std::size_t hash_node(const Node* n, std::size_t mask) {
  // Nodes are at least 16-byte aligned; Fibonacci hashing spreads the remaining bits.
  const auto bits = reinterpret_cast<std::uintptr_t>(n) >> 4;
  return static_cast<std::size_t>((bits * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

// Nodes the last run on this thread reached: training loops walk graphs of one size over and
// over, so a run sizes its records once instead of growing them step by step.
thread_local std::size_t tls_last_run_nodes = 0;

std::size_t table_size_for(std::size_t nodes) {
  std::size_t n = 64;
  while (n < 2 * nodes) n *= 2;
  return n;
}

}  // namespace

GraphTask::GraphTask(Options options) : options_(options) {
  slots_.reserve(tls_last_run_nodes);
  buffers_.reserve(tls_last_run_nodes + tls_last_run_nodes / 4);
  table_.assign(table_size_for(tls_last_run_nodes), 0);
}

GraphTask::~GraphTask() { tls_last_run_nodes = slots_.size(); }

// Note [Graph task hints]
// Every reached node's slot is in the table, so a run never depends on a hint; the hint makes
// the common case (one run at a time) a load and a compare instead of a hash probe per edge.
GraphTask::Slot* GraphTask::find_in_table(const Node* n) {
  const std::size_t mask = table_.size() - 1;
  for (std::size_t i = hash_node(n, mask);; i = (i + 1) & mask) {
    const uint32_t e = table_[i];
    if (e == 0) return nullptr;
    if (slots_[e - 1].node == n) return &slots_[e - 1];
  }
}

uint32_t GraphTask::visit(Node* n, bool& fresh) {
  const uint32_t h = n->graph_task_hint().load(std::memory_order_relaxed);
  if (h < slots_.size() && slots_[h].node == n) {
    fresh = false;
    return h;
  }
  const std::size_t mask = table_.size() - 1;
  std::size_t i = hash_node(n, mask);
  for (;; i = (i + 1) & mask) {
    const uint32_t e = table_[i];
    if (e == 0) break;
    if (slots_[e - 1].node == n) {
      fresh = false;
      n->graph_task_hint().store(e - 1, std::memory_order_relaxed);
      return e - 1;
    }
  }
  fresh = true;
  const auto index = static_cast<uint32_t>(slots_.size());
  slots_.push_back(Slot{n, 0, static_cast<uint32_t>(buffers_.size()), false, false});
  const uint32_t outputs = n->num_outputs();
  if (outputs == 1) [[likely]] {  // resize's general loop costs more than the whole probe
    buffers_.emplace_back();
  } else {
    buffers_.resize(buffers_.size() + outputs);
  }
  table_[i] = index + 1;
  n->graph_task_hint().store(index, std::memory_order_relaxed);
  if (2 * slots_.size() > table_.size()) grow();
  return index;
}

void GraphTask::grow() {
  std::vector<uint32_t> bigger(table_.size() * 2, 0);
  const std::size_t mask = bigger.size() - 1;
  for (uint32_t e : table_) {
    if (e == 0) continue;
    std::size_t i = hash_node(slots_[e - 1].node, mask);
    while (bigger[i] != 0) i = (i + 1) & mask;
    bigger[i] = e;
  }
  table_ = std::move(bigger);
}

const GraphTask* current_graph_task() { return tls_current_task; }

CurrentGraphTask::CurrentGraphTask(const GraphTask* task) : prev_(tls_current_task) {
  tls_current_task = task;
}
CurrentGraphTask::~CurrentGraphTask() { tls_current_task = prev_; }

}  // namespace adjoint::autograd
