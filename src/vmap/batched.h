// Batched tensors: what a function sees of its arguments inside vmap.
//
// Note [Batched tensors]
// vmap(f)(xs) runs f once over the whole batch. Each batched argument reaches f as a tensor of
// the per-example (logical) shape whose TensorImpl points at a BatchedValue: `value`, the whole
// batch (the physical tensor), `bdim`, where the batch dim sits in it, and `level`, the vmap
// that made it. So f's shape logic (x.size(0), reshape({-1, 4}), sum(0)) sees one example.
// The wrapper shares the physical tensor's storage, hence its version counter, but its own
// memory is never read: TensorImpl::data() throws, so a kernel that meets a batched tensor
// without a batching rule fails with an error naming the op instead of computing on the wrong
// elements.
//
// An op with a batched input goes to its batching rule (src/vmap/batch_rule.h) from apply<Op>:
// the rule runs the op, or other ops, on the physical values, and the result is wrapped at the
// same level. Those ops go through apply<Op> again, so everything below the vmap (recording for
// an outer grad, tangents of an outer jvp, an outer vmap) happens to the physical values, while
// a grad or jvp inside the vmap records and pushes tangents on the wrappers. That is what makes
// the order of transforms the order of layers (JAX's trace levels, functorch's DynamicLayer):
// vmap(grad(f)) differentiates per example, grad(vmap(f)) differentiates the batched function.
// Nested vmaps nest wrappers; an op processes the highest level among its inputs first, and
// inputs batched only at lower levels are passed to the rule as unbatched (they are constants
// of that level), so a tensor captured from outside never mixes with the inner batch.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "adjoint/tensor.h"
#include "adjoint/tensor_impl.h"
#include "adjoint/vmap.h"
#include "core/mode_state.h"

namespace adjoint::detail {

struct BatchedValue {
  Tensor value;  ///< the whole batch
  int64_t bdim;  ///< where the batch dim is in value
  int level;     ///< the id of the vmap that made it
};

/// One open vmap on this thread.
struct VmapLevel {
  int id;
  int64_t size;
  Randomness randomness;
};

/// The vmaps open on this thread, outermost first.
std::vector<VmapLevel>& vmap_levels();

/// Opens a level while alive (the transform's scope).
class VmapLevelGuard {
 public:
  VmapLevelGuard(int64_t size, Randomness randomness);
  ~VmapLevelGuard();
  VmapLevelGuard(const VmapLevelGuard&) = delete;
  VmapLevelGuard& operator=(const VmapLevelGuard&) = delete;
  int id() const { return id_; }

 private:
  int id_;
};

/// A tensor of value's shape without dim `bdim`, batched at `level`.
Tensor make_batched(Tensor value, int64_t bdim, int level);

inline const BatchedValue* batched_of(const Tensor& t) {
  return t.defined() ? t.impl()->batched.get() : nullptr;
}
/// The level t is batched at (its outermost wrapper), or 0.
inline int batch_level(const Tensor& t) {
  const BatchedValue* b = batched_of(t);
  return b ? b->level : 0;
}
/// The highest level among the inputs (0: none is batched). Throws if that level is not open
/// (a batched tensor that escaped its vmap).
int top_batch_level(std::span<const Tensor> inputs, const char* op);
/// The size of the batch of an open level.
int64_t level_size(int level);

/// Every example's values at once: t without its vmap wrappers (the innermost physical
/// tensor; t itself when not batched). For code that reads values to check them (a target in
/// range) or to decide how to compute (a norm bound, a singularity test, convergence): the
/// check then holds for every example, and the decision is taken for the batch as a whole.
/// The batch dims (one per level) come first, then the logical dims.
Tensor all_examples(Tensor t);

/// t's physical value with the batch dim of `level` moved to the front, if t is batched at
/// that level; else t itself.
Tensor batch_front(const Tensor& t, int level);

/// `shape` of random values drawn by `draw`, as the open vmaps' Randomness asks: an error,
/// the same values for every example, or different ones (drawn for the whole batch).
Tensor draw_random(const Shape& shape, const char* op,
                   const std::function<Tensor(const Shape&)>& draw);

/// Writes `value` (self's logical shape) into the batched or unbatched `self` through their
/// physical values; a batched value into an unbatched self is an error naming `op`.
void write_batched(const Tensor& self, const Tensor& value, const char* op);

/// Writes `value` into `self` as an in-place op's commit does: through the physical values
/// when either is batched by an open vmap (write_batched), else by the copy kernel.
void write_logical(const Tensor& self, const Tensor& value, const char* op);

/// For an in-place write into `view` of `base` (Note [Views and in-place ops under vmap] in
/// src/autograd/view_tracking.cpp): both physical values with the batch dim first, or nullopt
/// when neither is batched. Errors naming `op` when they are batched differently, or by
/// nested vmaps.
std::optional<std::pair<Tensor, Tensor>> physical_base_and_view(const Tensor& base,
                                                                const Tensor& view, const char* op);

/// Throws when backward() inside vmap brings `grad`, batched at a level `leaf` is not, to the
/// leaf's .grad (torch.func's rule): it would hold a different value for every example and
/// escape the vmap.
void check_grad_fits_leaf(const Tensor& grad, const Tensor& leaf);

/// x with dim `from` moved to position `to` (a permute).
Tensor move_dim(const Tensor& x, int64_t from, int64_t to);

}  // namespace adjoint::detail
