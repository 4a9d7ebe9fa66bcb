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

}  // namespace

GraphTask::Slot* GraphTask::find(const Node* n) {
  const std::size_t mask = table_.size() - 1;
  for (std::size_t i = hash_node(n, mask);; i = (i + 1) & mask) {
    const uint32_t e = table_[i];
    if (e == 0) return nullptr;
    if (slots_[e - 1].node == n) return &slots_[e - 1];
  }
}

uint32_t GraphTask::visit(Node* n, bool& fresh) {
  const std::size_t mask = table_.size() - 1;
  std::size_t i = hash_node(n, mask);
  for (;; i = (i + 1) & mask) {
    const uint32_t e = table_[i];
    if (e == 0) break;
    if (slots_[e - 1].node == n) {
      fresh = false;
      return e - 1;
    }
  }
  fresh = true;
  const auto index = static_cast<uint32_t>(slots_.size());
  slots_.push_back(Slot{n, 0, static_cast<uint32_t>(buffers_.size()), false, false});
  buffers_.resize(buffers_.size() + n->num_outputs());
  table_[i] = index + 1;
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
