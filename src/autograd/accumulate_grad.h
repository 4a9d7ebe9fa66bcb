// AccumulateGrad: the node at the end of every leaf that requires grad; it adds incoming
// gradients into the leaf's .grad.
#pragma once

#include <mutex>

#include "adjoint/autograd.h"
#include "adjoint/tensor_impl.h"

namespace adjoint {

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : Node(1), leaf_(std::move(leaf)) {
    topological_nr_ = 0;  // no edges: the end of every path
  }
  std::string name() const override { return "AccumulateGrad"; }
  TensorList apply(TensorList&& grads, const BackwardRun& run) override;
  /// Runs the leaf's tensor hooks on `g` in registration order (each may replace it).
  void run_hooks(Tensor& g) const;
  /// Runs the leaf's post-accumulate-grad hooks, once its .grad is final for a run.
  void run_post_accumulate_hooks() const;
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }
  /// Held while .grad changes: backward runs on several threads may reach one leaf.
  std::mutex& mutex() { return mutex_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
  std::mutex mutex_;
};

namespace detail {
/// Throws unless a gradient hook returned a gradient shaped like the one it was given, naming
/// the node the gradient flows into.
void check_hook_result(const Tensor& returned, const Tensor& grad, const char* node);
}  // namespace detail

namespace autograd {

/// The .grad a VJP may add an input's gradient into itself, and the lock that keeps other
/// threads' backward runs off it meanwhile; `grad` is undefined when the VJP may not.
struct GradInto {
  Tensor grad;
  std::unique_lock<std::mutex> lock;
  bool defined() const { return grad.defined(); }
  /// Call once the VJP has added into `grad`: bumps its version (saved tensors of it see the
  /// change) and tells the run, so that the leaf's post-accumulate hooks still run.
  void added() const {
    grad.impl()->storage->bump_version();
    if (slot_added) *slot_added = true;
  }
  bool* slot_added = nullptr;  ///< the run's record for the leaf (GraphTask::Slot::added_into)
};

/// The .grad a VJP may add input i's gradient into itself, in place, instead of returning it
/// (returning undefined for it instead): defined only where that is exactly what AccumulateGrad
/// would do (see Note [Adding into .grad in place]). `e` is the input's edge; shape and dtype
/// are the input's; `run` is the backward run applying the VJP.
GradInto grad_to_add_into(const Edge& e, const Shape& shape, DType dtype, const BackwardRun& run);

/// The float32 .grad of the leaf that a dtype cast (edge `e`) was made from, where a VJP may add
/// the widening of the cast's 16-bit gradient into it itself (returning undefined for the
/// cast instead); see Note [Adding into .grad through a cast].
GradInto grad_to_add_into_through_cast(const Edge& e, const Shape& shape, const BackwardRun& run);

}  // namespace autograd

}  // namespace adjoint
