// The Adam/AdamW update of one parameter in two forms that give bitwise the same result: the
// op-by-op reference (in-place tensor ops, any layout and dtype) and a fused kernel (one pass
// over param, grad, exp_avg and exp_avg_sq). Internal to the library; tests include it to
// run both forms on the same inputs. See Note [Fused Adam is bitwise the op-by-op update].
#pragma once

#include <cstdint>
#include <functional>

#include "adjoint/tensor.h"

namespace adjoint::optim::detail {

/// The hyper-parameters of one update. step: the parameter's own step count, this update
/// included (>= 1).
struct AdamStep {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled = false;  // AdamW
  int64_t step = 1;
};

/// A scratch buffer of `like`'s shape and dtype for slot 0 or 1 (Optimizer::scratch_like).
using AdamScratch = std::function<Tensor(const Tensor& like, int slot)>;

/// Whether this build can run the fused kernel at all: false where the compiler may contract
/// a * b + c into an FMA (see the note in adam_fused.cpp), and then adam_update_fused always
/// declines.
bool adam_fused_available();

/// The update as in-place tensor ops, in PyTorch's floating-point order. The reference: every
/// layout and dtype mix that the in-place ops accept.
void adam_update_ops(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                     const AdamStep& s, const AdamScratch& scratch);

/// The same update in one pass. Returns false, having changed nothing, unless param, grad,
/// exp_avg and exp_avg_sq are contiguous float32 or float64 of one dtype and shape, in four
/// separate storages, with grad mode off and no forward-mode level active.
bool adam_update_fused(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                       const AdamStep& s);

/// adam_update_fused where it applies, else adam_update_ops (what Adam::update runs). Returns
/// whether the fused kernel ran.
bool adam_update(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                 const AdamStep& s, const AdamScratch& scratch);

}  // namespace adjoint::optim::detail
