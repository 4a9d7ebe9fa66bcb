// Views and in-place ops: a view sees in-place changes of its base in its gradients, and an
// in-place op on a view while recording changes the base's history. See the Note below.
#pragma once

#include "adjoint/tensor.h"
#include "adjoint/tensor_impl.h"

namespace adjoint::detail {

// Note [Views and in-place ops]
// A view (the output of a view op: view, reshape, slice, select, permute, expand, ...) shares
// memory with its base, the tensor it was ultimately taken from (itself no such view); the two
// share the storage's version counter. As in PyTorch, each sees the other's in-place changes:
// - In-place on the base, or on another view of it, bumps the version. A view whose version is
//   behind takes a fresh history when next used (by an op, backward, requires_grad(),
//   grad_fn()): an as-strided view of the base's current history, `AsStridedBackward`.
// - In-place on a view while recording: the op runs out of place on the view's value, the
//   result is written into the memory, the base's history becomes `CopySlicesBackward`(old
//   base, result) -- the base with the view's window replaced -- and the view's history is
//   taken anew from the base's.
// Both rules map the view's elements to its base's through an index map (for each element
// of the view, the flat index of the base element at the same memory position), made once
// per new history. As in PyTorch, while recording it is an error to modify in place a view of
// a leaf that requires grad, a view whose elements overlap in memory (expand), and a view
// taken in no-grad mode of a base that requires grad.
// A view that requires_grad_() makes a leaf stops being tracked: it is the base of the views
// taken of it from then on, and in-place changes of its old base change its value but do not
// give it a history (PyTorch would, turning the leaf into a non-leaf whose history can reach
// the leaf's own AccumulateGrad: a reference cycle).

/// Marks `out`, the output of a view op on `input`, as a view of input's base.
void track_view(const Tensor& out, const Tensor& input);

/// Gives `view` the history of its window of the base's current value (see the Note).
void regenerate_view_history(const Tensor& view);

/// Brings a view's history up to date when its base was modified in place since it was made.
/// Cheap for everything else: the per-op path calls it on every input.
inline void refresh_view(const Tensor& t) {
  const TensorImpl* i = t.impl();
  if (i && i->view_base && i->view_version != i->storage->version()) [[unlikely]]
    regenerate_view_history(t);
}

inline bool is_tracked_view(const Tensor& t) { return t.impl()->view_base != nullptr; }

/// Throws (naming `op`) where an in-place op on the view `self` with grad mode on is refused:
/// see the Note.
void check_view_inplace(const Tensor& self, bool recording, const char* op);

/// The recorded in-place op on a view: writes `result` (of the view's shape) into the view's
/// memory and updates the histories of the base and the view (see the Note).
void commit_to_view(const Tensor& self, const Tensor& result);

}  // namespace adjoint::detail
