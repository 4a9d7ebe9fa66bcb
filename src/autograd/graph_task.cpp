// GraphTask's node records: each node a run reaches gets a slot, found through the node's
// claim word when the run holds it and through a small table when another live run does.
#include "autograd/graph_task.h"

#include <algorithm>
#include <array>
#include <atomic>

namespace adjoint::autograd {
namespace {

// Note [Graph task claims]
// A run must find a node's slot in a few instructions (discovery visits every edge, the run
// loop looks up every edge again) without keeping anything per run on the node, since runs on
// other threads or nested runs may reach the same node at the same time.
//
// Each run takes a serial and registers it in kLiveRuns while it is alive. A node's claim
// word holds (serial, slot) of the run that last claimed it. A run claims a node with a
// compare-and-swap, and only from a run that is no longer registered: so a live run's claims
// are never taken from it, and "the claim is not mine" means "not visited yet" unless the
// node is in the run's table. A node whose claim belongs to another live run goes into the
// table instead. In the usual case (one run at a time) the table stays empty and a visit is
// a load, two compares and the swap.
//
// A run registers in the ring entry serial % kRing; when that entry is taken (kRing runs
// alive at once, or a long run sharing an entry with a later one) it runs without
// registering, every node through its table. A claim is used only after checking that the
// slot it names holds that node, so even a reused serial (2^32 runs later) cannot mislead.
constexpr std::size_t kRing = 64;
std::array<std::atomic<uint32_t>, kRing> g_live_runs{};
std::atomic<uint32_t> g_next_serial{0};

uint32_t register_run() {
  uint32_t serial = g_next_serial.fetch_add(1, std::memory_order_relaxed) + 1;
  if (serial == 0) serial = g_next_serial.fetch_add(1, std::memory_order_relaxed) + 1;
  uint32_t free = 0;
  if (g_live_runs[serial % kRing].compare_exchange_strong(free, serial, std::memory_order_acq_rel))
    return serial;
  return 0;
}

bool run_is_live(uint32_t serial) {
  return serial != 0 && g_live_runs[serial % kRing].load(std::memory_order_acquire) == serial;
}

std::size_t hash_node(const Node* n, std::size_t mask) {
  // Nodes are at least 16-byte aligned; Fibonacci hashing spreads the remaining bits.
  const auto bits = reinterpret_cast<std::uintptr_t>(n) >> 4;
  return static_cast<std::size_t>((bits * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

// Nodes the last run on this thread reached: training loops walk graphs of one size over and
// over, so a run sizes its records once instead of growing them step by step.
thread_local std::size_t tls_last_run_nodes = 0;

}  // namespace

GraphTask::GraphTask(Options options) : options_(options), serial_(register_run()) {
  slots_.reserve(tls_last_run_nodes);
  buffers_.reserve(tls_last_run_nodes + tls_last_run_nodes / 4);
}

GraphTask::~GraphTask() {
  tls_last_run_nodes = slots_.size();
  // Released after the last use of a claim: a run that sees the entry free may take them.
  if (serial_ != 0) g_live_runs[serial_ % kRing].store(0, std::memory_order_release);
}

GraphTask::Slot* GraphTask::find_in_table(const Node* n) {
  const std::size_t mask = table_.size() - 1;
  for (std::size_t i = hash_node(n, mask);; i = (i + 1) & mask) {
    const uint32_t e = table_[i];
    if (e == 0) return nullptr;
    if (slots_[e - 1].node == n) return &slots_[e - 1];
  }
}

uint32_t GraphTask::visit(Node* n, bool& fresh) {
  std::atomic<uint64_t>& claim_word = n->graph_task_claim();
  uint64_t claim = claim_word.load(std::memory_order_acquire);
  for (;;) {
    const auto owner = static_cast<uint32_t>(claim >> 32);
    const auto i = static_cast<uint32_t>(claim);
    if (owner == serial_ && i < slots_.size() && slots_[i].node == n) {
      fresh = false;
      return i;
    }
    if (table_entries_ != 0) {
      if (const Slot* s = find_in_table(n)) {
        fresh = false;
        return static_cast<uint32_t>(s - slots_.data());
      }
    }
    fresh = true;
    if (serial_ == 0 || run_is_live(owner)) return add_to_table(n);
    const auto index = static_cast<uint32_t>(slots_.size());
    const uint64_t mine = (static_cast<uint64_t>(serial_) << 32) | index;
    if (claim_word.compare_exchange_weak(claim, mine, std::memory_order_acq_rel,
                                         std::memory_order_acquire))
      return add_slot(n);
    // Another run claimed it (or the swap failed spuriously): decide again on the new claim.
  }
}

uint32_t GraphTask::add_slot(Node* n) {
  const auto index = static_cast<uint32_t>(slots_.size());
  slots_.push_back(Slot{n, 0, static_cast<uint32_t>(buffers_.size()), false, false, false});
  const uint32_t outputs = n->num_outputs();
  if (outputs == 1) [[likely]] {  // resize's general loop costs more than the whole visit
    buffers_.emplace_back();
  } else {
    buffers_.resize(buffers_.size() + outputs);
  }
  return index;
}

uint32_t GraphTask::add_to_table(Node* n) {
  if (2 * (table_entries_ + 1) > table_.size()) grow_table();
  const uint32_t index = add_slot(n);
  const std::size_t mask = table_.size() - 1;
  std::size_t i = hash_node(n, mask);
  while (table_[i] != 0) i = (i + 1) & mask;
  table_[i] = index + 1;
  ++table_entries_;
  return index;
}

void GraphTask::grow_table() {
  std::vector<uint32_t> bigger(std::max<std::size_t>(64, table_.size() * 2), 0);
  const std::size_t mask = bigger.size() - 1;
  for (uint32_t e : table_) {
    if (e == 0) continue;
    std::size_t i = hash_node(slots_[e - 1].node, mask);
    while (bigger[i] != 0) i = (i + 1) & mask;
    bigger[i] = e;
  }
  table_ = std::move(bigger);
}

}  // namespace adjoint::autograd
