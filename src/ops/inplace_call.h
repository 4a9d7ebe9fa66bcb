// An in-place op as the layers of the dispatch stack see it (Note [In-place ops in the stack]
// in src/ops/inplace.cpp): the tensor it writes first, its operands after, and what it does in
// each layer that handles it. The in-place tensor ops use it, and so does the fused Adam step
// (src/optim/adam_fused.cpp), so that observers see the optimizer's update either way.
#pragma once

#include <array>
#include <cstddef>
#include <span>

#include "adjoint/error.h"
#include "adjoint/tensor.h"
#include "dispatch/layer.h"

namespace adjoint::detail {

/// What one in-place op does in each layer that handles it.
class InplaceWays {
 public:
  /// The new value of the written tensor, out of place, in its dtype (for the Trace layer).
  virtual Tensor value() = 0;
  /// The Autograd layer: the out-of-place way when recording or dual, else call.next().
  virtual void autograd(OpCall& call) = 0;
  /// The Batching layer: an operand is batched by an open vmap.
  virtual void batched() = 0;
  /// The kernel writes the tensor.
  virtual void direct() = 0;

 protected:
  ~InplaceWays() = default;
};

/// Whether some optional layer that in-place ops take part in is on; when none is, an
/// in-place op runs its Autograd way with the kernel below it, building no call.
inline bool inplace_stack_on() {
  return (tls_mode.layers & layers_for(AutocastPolicy::Follow)) != 0;
}

class InplaceCall final : public OpCall {
 public:
  static constexpr std::size_t kMaxTensors = 4;
  /// `tensors`: the written tensor first (at most kMaxTensors in all).
  InplaceCall(const char* op, std::span<const Tensor> tensors, InplaceWays& ways)
      : OpCall(op, AutocastPolicy::Follow, layers_for(AutocastPolicy::Follow)),
        ways_(ways),
        count_(tensors.size()) {
    for (std::size_t i = 0; i < count_; ++i) inputs_[i] = tensors[i];
  }
  std::span<Tensor> inputs() override { return {inputs_.data(), count_}; }
  std::vector<Tensor>& saved() override { return saved_; }
  Tensor run_kernel() override {
    ways_.direct();
    return inputs_[0];
  }
  Tensor run_batching_rule(int /*level*/) override {
    ways_.batched();
    return inputs_[0];
  }
  Tensor run_autograd() override {
    ways_.autograd(*this);
    return inputs_[0];
  }
  Generator* generator() const override { return nullptr; }
  Tensor run_batched_draw() override {  // only draws are asked
    ADJOINT_ASSERT(false, name(), " is not a random draw");
    return Tensor();
  }
  bool makes_constant() const override { return false; }
  ExternalExport constant_recipe() const override { return {}; }
  bool custom_function() const override { return false; }
  CustomReplay custom_replay() override {  // only custom function calls are asked
    ADJOINT_ASSERT(false, name(), " is not a custom function");
    return {};
  }
  bool writes_in_place() const override { return true; }
  Tensor run_out_of_place() override { return ways_.value(); }
  std::any op() const override { return {}; }
  void set_op(const std::any& /*op*/) override {}
  std::shared_ptr<const TracedOp> traced_op() const override { return nullptr; }

 private:
  InplaceWays& ways_;
  std::array<Tensor, kMaxTensors> inputs_;
  std::size_t count_;
  std::vector<Tensor> saved_;
};

}  // namespace adjoint::detail
