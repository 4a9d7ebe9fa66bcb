// Forward mode internals: where tangents live and which dual levels are visible.
//
// Note [Nested dual levels]
// Each DualLevel gets a process-wide unique id; a tensor keeps one tangent per level
// (AutogradMeta::tangents). The open levels form a stack, tls_mode.dual_level_ids, of which
// the first tls_mode.dual_levels are visible. An op computes the output's tangent of level i
// by running its JVP rule with only the levels below i visible: the rule's own ops then
// propagate the outer tangents, so the inner tangent carries its derivative with respect to
// every outer level (jvp of jvp gives second derivatives), while the rule never sees
// tangents of its own level or inner ones (no perturbation confusion). A tangent of a level
// that has been closed is simply never looked up again.
#pragma once

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

/// Whether `t` has a tangent at any visible level.
inline bool has_visible_tangent(const Tensor& t) {
  if (!t.defined() || !t.impl()->autograd || t.impl()->autograd->tangents.empty()) return false;
  for (int i = 0; i < tls_mode.dual_levels; ++i)
    if (tangent_at(t, tls_mode.dual_level_ids[i])) return true;
  return false;
}

/// Sets (or replaces) the tangent of `t` at `level`.
void set_tangent(const Tensor& t, uint64_t level, Tensor value);

/// Copies onto `to` the tangents `from` has at the visible levels below `below` (an index
/// into the level stack), so that an alias keeps its outer derivatives.
void copy_tangents_below(const Tensor& from, const Tensor& to, int below);

/// Shows only the first `visible` dual levels while alive.
struct VisibleLevels {
  int prev = tls_mode.dual_levels;
  explicit VisibleLevels(int visible) { tls_mode.dual_levels = visible; }
  ~VisibleLevels() { tls_mode.dual_levels = prev; }
  VisibleLevels(const VisibleLevels&) = delete;
  VisibleLevels& operator=(const VisibleLevels&) = delete;
};

}  // namespace adjoint::detail
