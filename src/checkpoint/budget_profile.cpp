// profile_sequential: runs each layer of a sequential model plainly, counts its FLOPs through
// the op observer and walks the graph it recorded for the storages its ops saved; and
// measure_saved_peak, the measurement that counts the same way. The planner is budget.cpp.
//
// Note [FLOP counting]
// FLOPs are counted, not timed, so a plan does not depend on the machine's noise. While a
// layer runs, a thread-local op observer (src/autograd/memory_hooks.h) sees every op that
// goes through apply<Op> with its inputs and output: matmul, linear and dot cost 2mnk (each
// output element is a k-long multiply-add), views (view, permute, expand, slice, select) cost
// nothing, every other op the larger element count of its inputs and output (one operation
// per element: elementwise ops exactly, reductions and normalisations roughly). Only the
// ratios between layers matter to the planner, and matmuls dominate them. In-place ops and
// factories are not ops in this sense and cost nothing.
//
// Note [Profiling layer by layer]
// Each layer runs on a detached copy of its input (shared storage, same requires_grad), so
// its graph stops at its own input and walking it from the output finds that layer's saved
// tensors only. Its graph is dropped once walked, and only its output's data is kept for the
// next layer: the profile holds one layer's activations at a time, which matters because a
// budget is wanted precisely when everything does not fit. Storages are told apart by
// address while alive and by a weak reference after (an address is reused once a storage
// dies); what two layers share (the boundary between them, parameters, buffers) stays alive
// and so keeps its id.
#include <algorithm>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "adjoint/checkpoint_budget.h"
#include "adjoint/error.h"
#include "adjoint/grad_mode.h"
#include "adjoint/memory.h"
#include "adjoint/nn/container.h"
#include "adjoint/tensor_impl.h"
#include "autograd/accumulate_grad.h"
#include "autograd/apply.h"
#include "autograd/memory_hooks.h"
#include "autograd/op_cost.h"
#include "autograd/saved_tensor.h"
#include "autograd/transform_support.h"
#include "checkpoint/budget_util.h"
#include "checkpoint/module_layers.h"
#include "checkpoint/rng.h"

namespace adjoint {
namespace {

// Counts the FLOPs of the ops run on this thread while alive, passing every event on to the
// observer it displaced (a memory timeline keeps recording through a profile).
class FlopCounter final : public detail::OpObserver {
 public:
  FlopCounter() {
    next_ = detail::tls_op_observer;
    detail::set_op_observer(this);
  }
  ~FlopCounter() override { detail::set_op_observer(next_); }
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;

  void forward_op_tensors(const char* op, const Tensor* inputs, std::size_t n,
                          const Tensor& output) override {
    flops += detail::op_flops(op, inputs, n, output);
    ++ops;
    OpObserver::forward_op_tensors(op, inputs, n, output);
  }

  uint64_t flops = 0;
  int64_t ops = 0;
};

// Ids for storages; see Note [Profiling layer by layer].
class StorageIds {
 public:
  explicit StorageIds(std::vector<std::size_t>& bytes) : bytes_(bytes) {}
  std::size_t id(const std::shared_ptr<StorageImpl>& s) {
    auto [it, fresh] = ids_.try_emplace(s.get(), refs_.size());
    if (!fresh && refs_[it->second].expired()) {  // a new storage where a dead one was
      it->second = refs_.size();
      fresh = true;
    }
    if (fresh) {
      refs_.push_back(s);
      bytes_.push_back(s->nbytes());
    }
    return it->second;
  }
  const std::weak_ptr<StorageImpl>& ref(std::size_t id) const { return refs_[id]; }

 private:
  std::unordered_map<const StorageImpl*, std::size_t> ids_;
  std::vector<std::weak_ptr<StorageImpl>> refs_;
  std::vector<std::size_t>& bytes_;
};

// What one layer's graph holds: the storages its nodes saved, and those of the leaves that
// require grad it reaches (parameters, and the stand-in for its input).
struct LayerGraph {
  std::vector<std::shared_ptr<StorageImpl>> saved;
  std::vector<std::shared_ptr<StorageImpl>> leaves;
};

// Walks the graph behind `out` through the nodes made since `first_seq` (iteratively: a layer
// may record many nodes).
LayerGraph walk_layer(const Tensor& out, uint64_t first_seq) {
  LayerGraph g;
  std::vector<std::shared_ptr<Node>> stack;
  std::unordered_set<const Node*> seen;
  if (std::shared_ptr<Node> fn = out.grad_fn()) {
    seen.insert(fn.get());
    stack.push_back(std::move(fn));
  }
  while (!stack.empty()) {
    std::shared_ptr<Node> node = std::move(stack.back());
    stack.pop_back();
    if (auto* acc = dynamic_cast<AccumulateGrad*>(node.get())) {
      g.leaves.push_back(acc->leaf()->storage);
      continue;
    }
    if (node->sequence_nr() < first_seq) continue;  // recorded before the layer ran
    node->visit_saved([&](const SavedTensor& s, const char*, std::size_t) {
      if (s.released() || !s.held_storage()) return;  // nothing held: nothing counted
      g.saved.push_back(s.unpack(node).impl()->storage);
    });
    for (const Edge& e : node->next_edges())
      if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node);
  }
  return g;
}

SequentialProfile profile_layers(const std::vector<CheckpointLayer>& layers, const Tensor& input,
                                 const std::vector<Generator*>& generators) {
  const char* op = "profile_sequential";
  ADJOINT_CHECK(input.defined(), Value, op, "the input is undefined");
  for (std::size_t i = 0; i < layers.size(); ++i)
    ADJOINT_CHECK(static_cast<bool>(layers[i]), Value, op, "layer ", i, " is empty");
  SequentialProfile p;
  StorageIds ids(p.storage_bytes);
  std::unordered_set<std::size_t> excluded;
  // Puts the generators back as they are now when the profile ends (rng.h).
  const detail::RngReplay restore(detail::RngSnapshot::capture(generators));
  const EnableGradGuard grad;
  const bool input_is_leaf = !input.grad_fn();
  Tensor x = detail::detach_alias(input);
  bool x_requires_grad = input.requires_grad();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    // A fresh leaf each time, so the stand-in gathers no .grad and its graph stays its own.
    const Tensor xi = x_requires_grad ? detail::detach_alias(x).requires_grad_(true) : x;
    const std::size_t input_id = ids.id(xi.impl()->storage);
    if (i == 0 && input_is_leaf) excluded.insert(input_id);  // the user's data or leaf
    LayerProfile lp;
    const uint64_t first_seq = detail::next_sequence_nr();
    Tensor y;
    {
      FlopCounter counter;
      y = layers[i](xi);
      lp.flops = counter.flops;
      lp.ops = counter.ops;
    }
    ADJOINT_CHECK(y.defined(), Value, op, "layer ", i, " returned an undefined tensor");
    const LayerGraph g = walk_layer(y, first_seq);
    for (const auto& s : g.leaves) {
      const std::size_t id = ids.id(s);
      if (id != input_id) excluded.insert(id);  // the stand-in's storage is the real input's
    }
    for (const auto& s : g.saved) lp.saved.push_back(ids.id(s));
    lp.input = input_id;
    p.layers.push_back(std::move(lp));
    x_requires_grad = y.requires_grad();
    x = detail::detach_alias(y);  // the graph (and with it what the layer saved) goes
  }
  // Leave the excluded storages out, now that all of them are known.
  for (LayerProfile& lp : p.layers) {
    std::erase_if(lp.saved, [&](std::size_t id) { return excluded.count(id) != 0; });
    std::sort(lp.saved.begin(), lp.saved.end());
    lp.saved.erase(std::unique(lp.saved.begin(), lp.saved.end()), lp.saved.end());
    if (excluded.count(lp.input)) lp.input = kNoStorage;
  }
  std::vector<std::size_t> sorted_excluded(excluded.begin(), excluded.end());
  std::sort(sorted_excluded.begin(), sorted_excluded.end());
  for (std::size_t id : sorted_excluded) p.excluded.push_back(ids.ref(id));
  detail::fill_layer_bytes(p);
  return p;
}

}  // namespace

SequentialProfile profile_sequential(const std::vector<CheckpointLayer>& layers,
                                     const Tensor& input,
                                     const std::vector<Generator*>& generators) {
  return profile_layers(layers, input, generators);
}

SequentialProfile profile_sequential(const nn::Sequential& layers, const Tensor& input) {
  return profile_layers(detail::module_layers(layers), input,
                        detail::with_module_generators(layers, {}).generators);
}

uint64_t SequentialProfile::forward_flops() const {
  uint64_t total = 0;
  for (const LayerProfile& l : layers) total += l.flops;
  return total;
}

std::size_t SequentialProfile::plain_peak_bytes() const {
  return predict_checkpoint_plan(*this, std::vector<CheckpointSegment>{}).predicted_peak_bytes;
}

std::string SequentialProfile::to_string() const {
  std::ostringstream os;
  os << "sequential profile: " << layers.size() << " layers, "
     << detail::human_bytes(plain_peak_bytes()) << " saved without checkpointing, "
     << detail::human_flops(forward_flops()) << " per forward\n";
  os << detail::str_printf("  %5s  %12s  %12s  %14s  %5s\n", "layer", "saves", "input",
                           "forward FLOPs", "ops");
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerProfile& l = layers[i];
    os << detail::str_printf(
        "  %5zu  %12s  %12s  %14s  %5lld\n", i, detail::human_bytes(l.saved_bytes).c_str(),
        l.input == kNoStorage ? "-" : detail::human_bytes(l.input_bytes).c_str(),
        detail::human_flops(l.flops).c_str(), static_cast<long long>(l.ops));
  }
  return os.str();
}

std::size_t measure_saved_peak(const SequentialProfile& profile,
                               const std::function<void()>& step) {
  ADJOINT_CHECK(static_cast<bool>(step), Value, "measure_saved_peak", "the step is empty");
  const SavedMemoryTracker tracking;
  // Held as counted for the whole step, the excluded storages never move the peak, whichever
  // saved tensors come and go on them. Declared before the claims: released after them.
  std::vector<std::shared_ptr<StorageImpl>> alive;
  std::vector<detail::SavedBytesClaim> claims;
  for (const auto& w : profile.excluded)
    if (std::shared_ptr<StorageImpl> s = w.lock()) alive.push_back(std::move(s));
  claims.resize(alive.size());
  for (std::size_t i = 0; i < alive.size(); ++i) claims[i].claim(alive[i].get());
  const std::size_t before = saved_memory_stats().current_bytes;
  reset_peak_saved_memory_stats();
  step();
  return saved_memory_stats().peak_bytes - before;
}

}  // namespace adjoint
