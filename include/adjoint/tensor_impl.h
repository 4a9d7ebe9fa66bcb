// TensorImpl: what a Tensor handle points at. Shape, strides and offset into a shared
// storage, plus an optional AutogradMeta holding the slots the autograd layer fills in
// (grad, grad_fn, tangent, hooks). Core code only stores these; it never interprets them.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "adjoint/dtype.h"
#include "adjoint/shape.h"
#include "adjoint/storage.h"
#include "adjoint/tensor.h"

namespace adjoint {

class Node;

using TensorHook = std::function<Tensor(const Tensor&)>;

/// A forward-mode tangent and the dual level it belongs to (see src/autograd/forward_ad.h).
struct TangentSlot {
  uint64_t level;
  Tensor value;
};

struct AutogradMeta {
  Tensor grad;                           ///< accumulated gradient of a leaf (or retained)
  std::shared_ptr<Node> grad_fn;         ///< the node that produced this tensor (non-leaves)
  std::weak_ptr<Node> grad_accumulator;  ///< a leaf's AccumulateGrad node, made on demand
  std::vector<TangentSlot> tangents;     ///< forward-mode tangents, one per dual level
  std::vector<std::pair<int, TensorHook>> leaf_hooks;  ///< hooks of a leaf, by id
  /// A leaf's hooks run once its .grad is final for a backward run, by id.
  std::vector<std::pair<int, std::function<void(const Tensor&)>>> post_accumulate_hooks;
  uint32_t output_nr = 0;  ///< which output of grad_fn this tensor is
  /// For a leaf a function transform made as its own input (from a primal that does not
  /// require grad): the sequence number taken when it was made, so that an outer transform
  /// started before it knows the leaf is its own business (Note [When a transform records its
  /// backward] in src/transforms/reverse.cpp). kNoSequence for every other tensor.
  static constexpr uint64_t kNoSequence = ~uint64_t{0};
  uint64_t transform_input_seq = kNoSequence;
  bool requires_grad = false;
  bool retains_grad = false;
  int retain_hook_id = -1;
};

struct TensorImpl;
namespace detail {
struct BatchedValue;
AutogradMeta* new_autograd_meta();
void delete_autograd_meta(AutogradMeta* m);
[[noreturn]] void throw_batched_data_access(const TensorImpl& t);
/// Throws when t has no data because it lives on the meta device; returns otherwise (a
/// CPU storage wrapping no memory).
void check_has_data(const TensorImpl& t);
struct AutogradMetaDeleter {
  void operator()(AutogradMeta* m) const { delete_autograd_meta(m); }
};
}  // namespace detail

struct TensorImpl {
  std::shared_ptr<StorageImpl> storage;
  Shape shape;
  Shape strides;       ///< in elements
  int64_t offset = 0;  ///< in elements
  int64_t numel = 1;
  DType dtype = kDefaultFloat;
  bool contiguous = true;
  bool is_view = false;    ///< made by a view op: shares storage with another tensor
  bool inference = false;  ///< made in inference mode: may not be saved for backward
  /// For the output of a view op (view, slice, permute, expand, ...): the tensor, not itself
  /// such a view, whose memory it views, and the storage version its history was last made
  /// at. A view whose storage changed since then takes its history anew from the base. See
  /// Note [Views and in-place ops] in src/autograd/view_tracking.h.
  std::shared_ptr<TensorImpl> view_base;
  uint64_t view_version = 0;
  /// Set once a node saved this tensor, or a view of it, for backward: an in-place op that
  /// gives it a new history then looks for saves it made stale (Note [Stale saves and
  /// reference cycles] in src/autograd/saved_tensor.cpp). Atomic: threads may save one tensor.
  std::atomic<bool> saved_for_backward{false};
  std::unique_ptr<AutogradMeta, detail::AutogradMetaDeleter> autograd;  ///< null until needed
  /// Set on a tensor seen inside vmap: its shape is the logical (per-example) shape and its
  /// values live in the batched value it points at, so its own memory may not be read (data()
  /// throws). See Note [Batched tensors] in src/vmap/batched.h.
  std::shared_ptr<const detail::BatchedValue> batched;

  TensorImpl(std::shared_ptr<StorageImpl> s, Shape shp, Shape str, int64_t off, DType dt);
  /// A contiguous tensor at offset 0 (the hot path: strides computed in place).
  TensorImpl(std::shared_ptr<StorageImpl> s, const Shape& shp, DType dt);
  AutogradMeta& meta() {
    if (!autograd) autograd.reset(detail::new_autograd_meta());
    return *autograd;
  }
  void* data() const {
    if (batched) [[unlikely]]
      detail::throw_batched_data_access(*this);
    char* base = static_cast<char*>(storage->data());
    if (!base) [[unlikely]]  // a meta tensor (no bytes), or wrapped memory of none
      detail::check_has_data(*this);
    return base + offset * static_cast<int64_t>(itemsize(dtype));
  }
  /// Recomputes numel and the contiguity flag after shape or strides change.
  void refresh();
};

}  // namespace adjoint
