// SavedTensor: a tensor an op keeps for its backward, with the version it had when saved.
// See Note [Saved tensor versions] in saved_tensor.cpp.
#pragma once

#include <any>
#include <memory>
#include <vector>

#include "adjoint/autograd.h"
#include "adjoint/storage.h"
#include "adjoint/tensor.h"
#include "adjoint/tensor_impl.h"
#include "autograd/memory_hooks.h"

namespace adjoint {

class SavedTensor {
 public:
  SavedTensor() = default;
  /// Saves `t`. An op's own output is saved without its grad_fn (which would be a reference
  /// cycle through the node) and re-attached to `owner` when unpacked.
  SavedTensor(const Tensor& t, bool is_output);

  /// The saved tensor, checked against in-place modification; `owner` is the node unpacking
  /// it (its name() appears in errors).
  Tensor unpack(const std::shared_ptr<Node>& owner) const;
  void release();
  bool defined() const { return defined_; }
  bool released() const { return released_; }
  /// Bytes this saved tensor holds (0 once released or when a pack hook took it elsewhere).
  std::size_t nbytes() const;
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  bool is_output() const { return is_output_; }
  /// Whether what was saved had no grad_fn: a parameter or input data, not an activation.
  bool is_leaf() const { return leaf_; }
  /// The storage this saved tensor keeps alive: its tensor's, or that of the Tensor a pack
  /// hook returned; null once released or when the hook kept the data elsewhere. Memory
  /// accounting and summaries count these (see Note [Saved tensor accounting]).
  const StorageImpl* held_storage() const;
  /// When this saved a version its storage no longer has (it can only ever throw the version
  /// error), swaps the kept handle for an alias without history: see Note [Stale saves and
  /// reference cycles].
  void forget_history_if_stale() const;

 private:
  Tensor with_tangents(Tensor t) const;

  // What was saved (no hooks active), else undefined. Mutable for forget_history_if_stale,
  // which changes nothing an unpack can observe.
  mutable Tensor data_;
  std::any packed_;  // what the pack hook returned
  std::shared_ptr<SavedTensorHooks::Unpack> unpack_;
  std::weak_ptr<StorageImpl> storage_;       // for the version check; weak so hooks may drop it
  const StorageImpl* storage_id_ = nullptr;  // to notice set_data on a kept handle
  uint64_t saved_version_ = 0;
  // Forward-mode tangents of what was saved, when the handle itself is not kept (outputs, and
  // anything a pack hook took): forward-over-reverse needs them in backward.
  // Shared so that closing a dual level can drop its slots here too (forward_ad.h).
  std::shared_ptr<std::vector<TangentSlot>> tangents_;
  Edge edge_;               // an input's gradient edge (when packed by a hook)
  uint32_t output_nr_ = 0;  // for outputs: which output of the owner node
  Shape shape_;
  DType dtype_ = kDefaultFloat;
  bool is_output_ = false;
  bool requires_grad_ = false;
  bool defined_ = false;
  bool released_ = false;
  bool leaf_ = false;
  // Declared last so it is destroyed first: uncounted before the storage it names can die.
  detail::SavedBytesClaim claim_;  // counted only while memory tracking is on
};

}  // namespace adjoint
