// saved_tensors_summary: walks a graph (iteratively: graphs may be a million nodes deep) and
// lists what each node saved, counting each storage once in the totals, in the order the
// nodes were created, which is the order the forward ran them.
#include <algorithm>
#include <cstdio>
#include <ostream>
#include <sstream>
#include <unordered_set>

#include "adjoint/autograd.h"
#include "adjoint/error.h"
#include "adjoint/memory.h"
#include "autograd/saved_tensor.h"

namespace adjoint {
namespace {

std::vector<Node*> graph_nodes(const std::vector<Tensor>& outputs) {
  std::vector<Node*> order, stack;
  std::unordered_set<const Node*> seen;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    ADJOINT_CHECK(outputs[i].defined(), Value, "saved_tensors_summary", "output ", i,
                  " is an undefined tensor");
    if (std::shared_ptr<Node> fn = outputs[i].grad_fn(); fn && seen.insert(fn.get()).second)
      stack.push_back(fn.get());
  }
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

std::string human_bytes(std::size_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace

SavedTensorsSummary saved_tensors_summary(const std::vector<Tensor>& outputs) {
  SavedTensorsSummary s;
  std::unordered_set<const StorageImpl*> counted;
  for (Node* n : graph_nodes(outputs)) {
    SavedNodeInfo info{n->name(), n->sequence_nr(), {}};
    n->visit_saved([&](const SavedTensor& t, const char* role, std::size_t index) {
      SavedTensorInfo e;
      e.role = role;
      e.index = index;
      e.shape = t.shape();
      e.dtype = t.dtype();
      e.bytes = static_cast<std::size_t>(t.shape().numel()) * itemsize(t.dtype());
      e.freed = t.released();
      e.leaf = t.is_leaf();
      if (const StorageImpl* st = t.held_storage()) {
        e.storage_bytes = st->nbytes();
        e.shared = !counted.insert(st).second;
        if (!e.shared) s.total_bytes += e.storage_bytes;
        if (!e.shared && e.leaf) s.leaf_bytes += e.storage_bytes;
      }
      info.saved.push_back(std::move(e));
    });
    s.num_saved += info.saved.size();
    s.nodes.push_back(std::move(info));
  }
  s.num_storages = counted.size();
  return s;
}

SavedTensorsSummary saved_tensors_summary(const Tensor& output) {
  return saved_tensors_summary(std::vector<Tensor>{output});
}

std::string SavedTensorsSummary::to_string() const {
  struct Row {
    std::string node, slot, shape, dtype, bytes, note;
  };
  std::vector<Row> rows{{"node", "saved", "shape", "dtype", "bytes held", ""}};
  std::size_t saving = 0;
  for (const SavedNodeInfo& n : nodes) {
    if (n.saved.empty()) continue;
    ++saving;
    for (std::size_t i = 0; i < n.saved.size(); ++i) {
      const SavedTensorInfo& t = n.saved[i];
      std::string slot = t.role == "output" ? t.role : t.role + " " + std::to_string(t.index);
      std::string note;
      auto add = [&](const std::string& what) { note += (note.empty() ? "" : ", ") + what; };
      if (t.freed) add("freed");
      if (t.shared) add("shared (counted above)");
      if (!t.freed && t.storage_bytes == 0) add("held by a saved-tensor hook");
      if (t.storage_bytes > t.bytes) add("view of a larger storage");
      if (t.leaf) add("leaf");
      rows.push_back({i == 0 ? n.name : "", std::move(slot), adjoint::to_string(t.shape),
                      std::string(adjoint::to_string(t.dtype)), std::to_string(t.storage_bytes),
                      std::move(note)});
    }
  }
  std::size_t w[5] = {};
  for (const Row& r : rows) {
    const std::string* cells[5] = {&r.node, &r.slot, &r.shape, &r.dtype, &r.bytes};
    for (int c = 0; c < 5; ++c) w[c] = std::max(w[c], cells[c]->size());
  }
  std::ostringstream o;
  o << "saved tensors: " << nodes.size() << " nodes, " << saving << " of them save tensors\n";
  for (const Row& r : rows) {
    auto pad = [&](const std::string& s, std::size_t width) {
      return s + std::string(width - s.size() + 2, ' ');
    };
    std::string line = pad(r.node, w[0]) + pad(r.slot, w[1]) + pad(r.shape, w[2]) +
                       pad(r.dtype, w[3]) + std::string(w[4] - r.bytes.size(), ' ') + r.bytes;
    if (!r.note.empty()) line += "  " + r.note;
    o << "  " << line << "\n";
  }
  o << "total: " << num_saved << " saved tensors in " << num_storages << " storages, "
    << total_bytes << " bytes (" << human_bytes(total_bytes) << ")\n"
    << "  leaves (parameters, inputs): " << human_bytes(leaf_bytes)
    << ", activations: " << human_bytes(total_bytes - leaf_bytes) << "\n";
  return o.str();
}

std::ostream& operator<<(std::ostream& os, const SavedTensorsSummary& s) {
  return os << s.to_string();
}

}  // namespace adjoint
