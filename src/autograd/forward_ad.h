// Forward mode internals: where tangents live and which dual levels are visible.
//
// Note [Nested dual levels]
// Each DualLevel gets a process-wide unique id; a tensor keeps one tangent per level
// (AutogradMeta::tangents). The open levels form a stack, tls_mode.dual_level_ids, and the
// bits of tls_mode.dual_visible say which of them propagate. An op computes the output's
// tangent of level i by running its JVP rule with only the visible levels below i: its ops then
// propagate the outer tangents, so the inner tangent carries its derivative with respect to
// every outer level (jvp of jvp gives second derivatives), while the rule never sees
// tangents of its own level or inner ones (no perturbation confusion). A tangent of a level
// that has been closed is never looked up again, and is dropped: see below.
//
// Note [Closing a dual level]
// A level remembers (weakly) every tensor and every saved-output copy that got a tangent of
// it, and erases those slots when it closes, as PyTorch does. Besides freeing the memory,
// this breaks the reference cycle a recorded tangent of a saved output makes with its node
// (Note [Tangents of saved outputs]) when no backward ever runs through it.
//
// Note [In-place ops on dual tensors]
// An in-place op on a tensor with a tangent, or with an operand that has one, updates the
// tangent whenever its level is visible, whether or not a graph is recorded (as PyTorch does
// whenever forward grad is enabled): the out-of-place op runs on a clone of the old value,
// its JVP rule gives the new tangent, and the tensor takes value and tangent. A tangent the
// result lacks becomes zero (copy_ or fill_ of a value without one), and levels hidden by
// NoForwardGradGuard are left as they are (PyTorch does not see them either). Tangents are
// replaced, never written into: they may be shared (make_dual takes the caller's tangent
// as is, copy_tangents shares handles). The cost: a tangent does not follow the memory. A
// view's tangent is its own tensor, not a view of its base's, so an in-place op whose new
// tangent other tensors on the same memory should see is refused with an error naming the
// op: a view that would get its first tangent at a level (its base would not), and any
// tensor whose memory another live tensor with a tangent at that level shares (a view of a
// dual, or the base of one). A dual from make_dual may be modified: its primal has no
// tangent at that level, so nothing else goes stale. PyTorch, whose view tangents are views
// of the base's, supports these; a view without a tangent of a tensor that gains one in
// place does not see it here (PyTorch's view reads it from its base).
#pragma once

#include <memory>
#include <vector>

#include "adjoint/tensor.h"
#include "adjoint/tensor_impl.h"
#include "core/mode_state.h"

namespace adjoint::detail {

/// The tangent of `t` at dual level `level`, or null.
inline const Tensor* tangent_at(const Tensor& t, uint64_t level) {
  if (!t.defined() || !t.impl()->autograd) return nullptr;
  for (const TangentSlot& s : t.impl()->autograd->tangents)
    if (s.level == level) return &s.value;
  return nullptr;
}

inline bool level_visible(int i) { return (tls_mode.dual_visible >> i) & 1u; }
/// The visibility bits of the levels below stack index i.
inline uint32_t levels_below(int i) { return tls_mode.dual_visible & ((1u << i) - 1u); }

/// Whether `t` has a tangent at any visible level.
inline bool has_visible_tangent(const Tensor& t) {
  if (!t.defined() || !t.impl()->autograd || t.impl()->autograd->tangents.empty()) return false;
  for (int i = 0; i < tls_mode.dual_levels_open; ++i)
    if (level_visible(i) && tangent_at(t, tls_mode.dual_level_ids[i])) return true;
  return false;
}

/// Sets (or replaces) the tangent of `t` at `level`.
void set_tangent(const Tensor& t, uint64_t level, Tensor value);

/// Remembers a copy of tangent slots (a saved output's) so that closing a level drops that
/// level's slot from it as well. See Note [Closing a dual level].
void track_tangent_copy(const std::shared_ptr<std::vector<TangentSlot>>& slots);

/// Copies onto `to` the tangents `from` has at the levels whose bits are set in `levels`, so
/// that an alias keeps its outer derivatives.
void copy_tangents(const Tensor& from, const Tensor& to, uint32_t levels);

/// Whether a live tensor other than `t` shares t's storage and has a tangent at `level`.
/// See Note [In-place ops on dual tensors].
bool other_dual_on_storage(const Tensor& t, uint64_t level);

/// Makes only the levels whose bits are set in `visible` propagate while alive.
struct VisibleLevels {
  uint32_t prev = tls_mode.dual_visible;
  explicit VisibleLevels(uint32_t visible) { tls_mode.dual_visible = visible; }
  ~VisibleLevels() { tls_mode.dual_visible = prev; }
  VisibleLevels(const VisibleLevels&) = delete;
  VisibleLevels& operator=(const VisibleLevels&) = delete;
};

}  // namespace adjoint::detail
