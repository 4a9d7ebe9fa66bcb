// Saving tensors for backward, the saved-tensor hook stack, and the version check.
//
// Note [Saved tensor versions]
// Every storage has a version counter, shared by all views of it, that in-place ops bump.
// A saved tensor remembers the version at save time; unpacking compares it with the current
// one and throws, naming the op, the tensor's shape and both versions, if they differ: the
// backward would otherwise silently use modified values. The counter is a separate shared
// A saved tensor holds its storage only weakly for this check: when a pack hook took the
// values elsewhere (offload, recompute) and the storage has since died, nothing can modify
// it any more and the hook's copy holds the values as saved.
//
// Note [Tangents of saved outputs]
// Forward over reverse (hvp, jacfwd of jacrev) runs backward inside a dual level, so the saved
// tensors a VJP reads must still carry their tangents. A saved input is the caller's handle
// and keeps them; a saved output is a fresh handle (see above), so the node copies the
// output's tangents and puts them back on unpack. When the tangent was itself recorded
// (reverse over forward), its graph reaches the node again through the output: a reference
// cycle, broken when backward runs through the node without retain_graph (release()).
//
// Note [Stale saves and reference cycles]
// A saved input keeps the caller's handle (so that double backward and forward-over-reverse
// see its history and tangents). When an in-place op later gives that very tensor a new
// history whose graph reaches the saving node (y = x * 2; z = y * y; y.add_(z)), the tensor
// holds its grad_fn, which reaches the node, which holds the tensor: a reference cycle that
// would leak the whole graph. PyTorch has the same cycle (pytorch#105147).
//
// Such a save is stale: it was made at an older version, so unpacking it can only throw the
// version error. So whenever a tensor that some node saved takes a new history
// (detail::take_history), forget_stale_saves walks the new history's graph and swaps every
// stale save it meets for an alias without history: the same storage and version check, no
// edge back. Every stale save, not only those of that tensor: a cycle may close through a
// node reached by the walk whose save of another tensor went stale earlier (fuzz_ops found
// one: z = pow(y, v) saves a view v of y; an in-place op through v's view gives y a history
// saving w; then an in-place op on w from z closes w -> z's node -> v -> y -> w, where the
// walk from w's new history reaches z's node but the save of w lies beyond v's stale save).
// The walk skips the tensor's previous grad_fn,
// whose graph the previous change already cleaned (and whose nodes, older than that change,
// saved older versions), so a loop of in-place updates walks only what each step added. A
// tensor nobody saved (the flag saved_for_backward) costs a load and a branch.
#include "autograd/saved_tensor.h"

#include <unordered_set>

#include "autograd/apply.h"
#include "autograd/forward_ad.h"

#include <vector>

#include "adjoint/detail/pool.h"
#include "adjoint/error.h"
#include "adjoint/tensor_impl.h"

namespace adjoint {
namespace {

struct HookPair {
  SavedTensorHooks::Pack pack;
  std::shared_ptr<SavedTensorHooks::Unpack> unpack;
};
thread_local std::vector<HookPair> tls_hooks;

// A new handle to t's data whose gradient flows along `edge`. Always a fresh handle: setting
// grad_fn on a handle the saved tensor keeps would make a node -> tensor -> node cycle.
Tensor attach(const Tensor& data, const Edge& edge, bool requires_grad) {
  Tensor t = detail::alias_without_history(data);
  if (!requires_grad) return t;
  AutogradMeta& m = t.impl()->meta();
  m.requires_grad = true;
  m.grad_fn = edge.node;
  m.output_nr = edge.input_nr;
  return t;
}

std::string owner_name(const std::shared_ptr<Node>& owner) {
  return owner ? owner->name() : std::string("a custom function");
}

}  // namespace

SavedTensorHooks::SavedTensorHooks(Pack pack, Unpack unpack) {
  tls_hooks.push_back({std::move(pack), std::make_shared<Unpack>(std::move(unpack))});
}
SavedTensorHooks::~SavedTensorHooks() { tls_hooks.pop_back(); }

SavedTensor::SavedTensor(const Tensor& t, bool is_output) {
  if (!t.defined()) return;
  const TensorImpl& impl = *t.impl();
  ADJOINT_CHECK(!impl.inference, Autograd, "autograd", "an inference tensor ", describe(t),
                " cannot be saved for backward; make it outside InferenceMode or clone() it");
  defined_ = true;
  is_output_ = is_output;
  storage_ = impl.storage;
  storage_id_ = impl.storage.get();
  saved_version_ = impl.storage->version();
  shape_ = impl.shape;
  dtype_ = impl.dtype;
  requires_grad_ = t.requires_grad();
  if (is_output) output_nr_ = impl.autograd ? impl.autograd->output_nr : 0;
  leaf_ = !is_output && !(impl.autograd && impl.autograd->grad_fn);
  if ((is_output || !tls_hooks.empty()) && impl.autograd && !impl.autograd->tangents.empty()) {
    tangents_ = std::make_shared<std::vector<TangentSlot>>(impl.autograd->tangents);
    detail::track_tangent_copy(tangents_);
  }
  if (!tls_hooks.empty()) {
    HookPair& hooks = tls_hooks.back();
    if (!is_output && requires_grad_) edge_ = autograd::gradient_edge(t);
    unpack_ = hooks.unpack;
    // The hook sees a tensor without history, as PyTorch's pack hooks do for outputs.
    packed_ = hooks.pack(is_output ? detail::alias_without_history(t) : detail::detach_alias(t));
  } else {
    data_ = is_output ? detail::alias_without_history(t) : t;
    // Only a kept caller's handle can close a cycle (Note [Stale saves and reference cycles]).
    if (!is_output) {
      auto mark = [](TensorImpl& i) {
        if (!i.saved_for_backward.load(std::memory_order_relaxed))
          i.saved_for_backward.store(true, std::memory_order_relaxed);
      };
      mark(*t.impl());
      if (impl.view_base) [[unlikely]]
        mark(*impl.view_base);
    }
  }
  if (detail::saved_tracking_enabled()) [[unlikely]]
    claim_.claim(held_storage());
}

Tensor SavedTensor::unpack(const std::shared_ptr<Node>& owner) const {
  if (!defined_) return {};
  ADJOINT_CHECK(!released_, Autograd, "backward",
                "trying to backward through the graph a second time (or to read saved tensors "
                "after they were freed): the saved tensors of ",
                owner_name(owner),
                " were freed when backward last ran; pass retain_graph=true to the first "
                "backward if you need to run backward twice",
                detail::creation_hint(owner.get()));
  if (auto storage = storage_.lock()) {
    ADJOINT_CHECK(storage->version() == saved_version_, Autograd, "backward",
                  "a tensor needed for the gradient of ", owner_name(owner),
                  " was modified by an in-place operation: ", shape_, " (", dtype_,
                  ") saved at version ", saved_version_, " is now at version ", storage->version(),
                  "; use an out-of-place op, or clone() the tensor before modifying it",
                  detail::creation_hint(owner.get()));
  }
  ADJOINT_CHECK(!data_.defined() || data_.impl()->storage.get() == storage_id_, Autograd,
                "backward", "a tensor needed for the gradient of ", owner_name(owner),
                " had its data replaced (set_data, Module::to) after it was saved: ", shape_, " (",
                dtype_, ") is now ", describe(data_));
  Tensor t;
  if (unpack_) {
    t = (*unpack_)(packed_);
    ADJOINT_CHECK(t.defined() && t.shape() == shape_ && t.dtype() == dtype_, Autograd,
                  "saved_tensor_hooks", "the unpack hook of a tensor saved by ", owner_name(owner),
                  " returned ", describe(t), " but ", shape_, " (", dtype_, ") was saved");
    return with_tangents(attach(t, is_output_ ? Edge{owner, output_nr_} : edge_, requires_grad_));
  }
  if (!is_output_) return data_;
  return with_tangents(attach(data_, Edge{owner, output_nr_}, requires_grad_));
}

Tensor SavedTensor::with_tangents(Tensor t) const {
  if (tangents_ && !tangents_->empty()) t.impl()->meta().tangents = *tangents_;
  return t;
}

void SavedTensor::release() {
  claim_.reset();  // before the storage can die and its address be reused
  data_ = Tensor();
  packed_.reset();
  edge_ = Edge();
  tangents_.reset();
  released_ = true;
}

void SavedTensor::forget_history_if_stale() const {
  if (!data_.defined()) return;
  if (data_.impl()->storage->version() == saved_version_) return;  // still valid: may be unpacked
  data_ = detail::alias_without_history(data_);
}

namespace detail {

void forget_stale_saves(Node* new_grad_fn, const Node* old_grad_fn) {
  std::vector<Node*> stack{new_grad_fn};
  std::unordered_set<const Node*> seen{new_grad_fn, old_grad_fn};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    n->visit_saved(
        [&](const SavedTensor& s, const char*, std::size_t) { s.forget_history_if_stale(); });
    for (const Edge& e : n->next_edges())
      if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
}

}  // namespace detail

const StorageImpl* SavedTensor::held_storage() const {
  if (data_.defined()) return data_.impl()->storage.get();
  const Tensor* packed = std::any_cast<Tensor>(&packed_);
  return packed && packed->defined() ? packed->impl()->storage.get() : nullptr;
}

std::size_t SavedTensor::nbytes() const {
  if (!data_.defined()) return 0;
  return data_.nbytes();
}

}  // namespace adjoint
